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
