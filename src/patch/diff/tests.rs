use super::*;
use crate::patch::outcome::Outcome;
use crate::patch::tree::mem::Mem;

const DIFF: &str = "diff --git a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+x = 1\n--- a/pkg/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n";
const ROOT: &str = "usr/lib/python3/dist-packages";

fn patch(affected: Option<&str>) -> DiffPatch {
    DiffPatch {
        meta: Meta {
            id: "t".into(),
            kind: "diff",
            title: "t".into(),
            services: vec![],
            backends: vec![],
            package: Some("pkg".into()),
            affected: affected.map(|a| crate::version::VersionRange::parse(a).expect("range")),
            mtime: "2001-01-01T00:00:00Z".into(),
            mtime_secs: 978_307_200,
            origin: "t/patch.toml".into(),
            definition_digest: String::new(),
        },
        package: "pkg".into(),
        root: None,
        diff_name: "fix.patch".into(),
        files: unified::parse(DIFF.as_bytes()).expect("parses"),
    }
}

fn tree(files: &[(&str, &str)]) -> Mem {
    Mem(
        files
            .iter()
            .map(|(p, c)| (format!("{ROOT}/{p}"), c.as_bytes().to_vec()))
            .collect(),
        None,
    )
}

const A: &str = "a\nb\nc\nd\ne\n";

#[test]
fn patches_creates_deletes_and_hides_bytecode() {
    let img = tree(&[
        ("pkg/__init__.py", ""),
        ("pkg/a.py", A),
        ("pkg/old.py", "gone\n"),
        ("pkg/__pycache__/a.cpython-312.pyc", "x"),
    ]);
    let v = patch(None).decide(&img);
    assert_eq!(v.outcome, Outcome::Patched, "{v:?}");
    let changes = v.changes;
    let Change::Write(a) = &changes[0] else {
        panic!("a write first")
    };
    assert_eq!(a.path, format!("{ROOT}/pkg/a.py"));
    assert_eq!(a.content.as_slice(), b"a\nb\nC\nd\ne\n");
    assert_eq!(
        (a.mode, a.uid, a.gid),
        (0o640, 7, 8),
        "header of the original"
    );
    assert!(
        matches!(&changes[1], Change::Whiteout(p) if *p == format!("{ROOT}/pkg/__pycache__/a.cpython-312.pyc")),
        "{changes:?}"
    );
    let Change::Write(n) = &changes[2] else {
        panic!("created file")
    };
    assert_eq!(
        (n.mode, n.uid, n.content.as_slice()),
        (0o644, 0, &b"x = 1\n"[..])
    );
    assert!(matches!(&changes[3], Change::Whiteout(p) if *p == format!("{ROOT}/pkg/old.py")));
}

#[test]
fn already_patched_partial_and_mismatch() {
    let done = tree(&[
        ("pkg/__init__.py", ""),
        ("pkg/a.py", "a\nb\nC\nd\ne\n"),
        ("pkg/new.py", "x = 1\n"),
    ]);
    assert_eq!(patch(None).decide(&done).outcome, Outcome::AlreadyPatched);
    let half = tree(&[
        ("pkg/__init__.py", ""),
        ("pkg/a.py", A),
        ("pkg/new.py", "x = 1\n"),
    ]);
    let v = patch(None).decide(&half);
    assert!(
        v.outcome == Outcome::Refused && v.reason.contains("partly applied"),
        "{v:?}"
    );
    let other = tree(&[
        ("pkg/__init__.py", ""),
        ("pkg/a.py", "a\nb\nX\nd\ne\n"),
        ("pkg/old.py", "gone\n"),
    ]);
    let v = patch(None).decide(&other);
    assert!(
        v.outcome == Outcome::Refused && v.reason.contains("hunk #1"),
        "{v:?}"
    );
}

#[test]
fn root_is_found_and_version_range_applies() {
    let none = tree(&[("other/x.py", "")]);
    assert_eq!(patch(None).decide(&none).outcome, Outcome::NotAffected);
    let mut two = tree(&[
        ("pkg/__init__.py", ""),
        ("pkg/a.py", A),
        ("pkg/old.py", "gone\n"),
    ]);
    two.0
        .insert("vllm-workspace/src/pkg/a.py".into(), A.as_bytes().to_vec());
    let v = patch(None).decide(&two);
    assert!(
        v.outcome == Outcome::Refused && v.reason.contains("2 roots"),
        "{v:?}"
    );
    let mut old = tree(&[
        ("pkg/__init__.py", ""),
        ("pkg/a.py", A),
        ("pkg/old.py", "gone\n"),
    ]);
    old.1 = Some("0.9.0".into());
    assert_eq!(
        patch(Some(">=1.0")).decide(&old).outcome,
        Outcome::NotAffected
    );
    old.1 = Some("1.2.0".into());
    assert_eq!(patch(Some(">=1.0")).decide(&old).outcome, Outcome::Patched);
}

/// A diff relative to an absolute directory, on a folder where that directory is reached
/// through a link: written at the real path, as GNU `patch -p1` run there writes it.
#[test]
fn a_diff_with_a_root_follows_links_to_the_real_directory() {
    use std::os::unix::fs::symlink;
    let work = tempfile::tempdir().expect("tmp");
    let root = work.path().join("rootfs");
    let real = root.join("usr/local/Ascend/atb-models-2.2/atb_llm/conf");
    std::fs::create_dir_all(&real).expect("mkdir");
    std::fs::write(real.join("config.json"), "{\n  \"ep_level\": 2\n}\n").expect("write");
    symlink("atb-models-2.2", root.join("usr/local/Ascend/atb-models")).expect("link");
    let folder = work.path().join("p");
    std::fs::create_dir_all(&folder).expect("mkdir");
    std::fs::write(
        folder.join("patch.toml"),
        "id = \"atb\"\nkind = \"diff\"\ntitle = \"t\"\nroot = \"/usr/local/Ascend/atb-models\"\ndiff = \"fix.patch\"\n",
    )
    .expect("write");
    std::fs::write(
        folder.join("fix.patch"),
        "--- a/atb_llm/conf/config.json\n+++ b/atb_llm/conf/config.json\n@@ -2 +2 @@\n-  \"ep_level\": 2\n+  \"ep_level\": 1\n",
    )
    .expect("write");
    let p = crate::patch::load_folder(&folder).expect("loads");
    assert_eq!(
        p.kind().paths(),
        ["usr/local/Ascend/atb-models/atb_llm/conf/config.json"]
    );
    assert!(p.kind().wanted().is_empty());
    let tree = crate::patch::dir::DirTree::open(&root).expect("tree");
    let v = p.decide(&tree);
    assert_eq!(v.outcome, Outcome::Patched, "{}", v.reason);
    assert_eq!(
        v.changes[0].path(),
        "usr/local/Ascend/atb-models-2.2/atb_llm/conf/config.json"
    );
    assert!(
        v.reason
            .contains("through /usr/local/Ascend/atb-models -> atb-models-2.2"),
        "{}",
        v.reason
    );
    crate::patch::dir::write_changes(&root, &v.changes).expect("write");
    let again = p.decide(&crate::patch::dir::DirTree::open(&root).expect("tree"));
    assert_eq!(again.outcome, Outcome::AlreadyPatched, "{}", again.reason);
    // No such directory and no such file: not affected.
    let empty = work.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let v = p.decide(&crate::patch::dir::DirTree::open(&empty).expect("tree"));
    assert_eq!(v.outcome, Outcome::NotAffected, "{}", v.reason);
    // The directory without the file: refused, naming it.
    std::fs::create_dir_all(empty.join("usr/local/Ascend/atb-models")).expect("mkdir");
    let v = p.decide(&crate::patch::dir::DirTree::open(&empty).expect("tree"));
    assert_eq!(v.outcome, Outcome::Refused);
    assert!(
        v.reason
            .contains("atb_llm/conf/config.json does not exist under the root"),
        "{}",
        v.reason
    );
}

#[test]
fn package_and_root_are_exclusive_and_affected_needs_a_package() {
    let load = |toml: &str| {
        crate::patch::load(toml, "p/patch.toml", None)
            .expect_err("refused")
            .to_string()
    };
    let e = load("id = \"a\"\nkind = \"diff\"\ntitle = \"t\"\npackage = \"vllm\"\nroot = \"/opt\"\ndiff = \"f\"\n");
    assert!(
        e.starts_with(
            "p/patch.toml:4: a diff is relative to a package or to a root directory, not both"
        ),
        "{e}"
    );
    let e = load("id = \"a\"\nkind = \"diff\"\ntitle = \"t\"\nroot = \"/opt\"\naffected = \">=1\"\ndiff = \"f\"\n");
    assert!(
        e.starts_with("p/patch.toml:5: affected tests the version of a package"),
        "{e}"
    );
    let e = load("id = \"a\"\nkind = \"diff\"\ntitle = \"t\"\nroot = \"opt\"\ndiff = \"f\"\n");
    assert!(
        e.starts_with("p/patch.toml:4: root: \"opt\" is not an absolute path"),
        "{e}"
    );
    let e = load("id = \"a\"\nkind = \"diff\"\ntitle = \"t\"\ndiff = \"f\"\n");
    assert!(e.contains("a diff needs `package`"), "{e}");
}
