use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use super::*;
use crate::patch::dir::{write_changes, DirTree};
use crate::patch::Outcome;

const DAEMON: &str = "usr/local/Ascend/mindie/latest/mindie-service/bin/mindieservice_daemon";
const REAL: &str = "usr/local/Ascend/mindie/8.3.RC1/mindie-service/bin/mindieservice_daemon";

/// A patch folder with `toml` and the given source files.
fn folder(dir: &Path, toml: &str, sources: &[(&str, &[u8])]) -> Result<Patch, String> {
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(dir.join("patch.toml"), toml).expect("write");
    for (name, bytes) in sources {
        std::fs::write(dir.join(name), bytes).expect("write");
    }
    crate::patch::load_folder(dir).map_err(|e| e.to_string())
}

const TOML: &str = "id = \"mindie-refresh-entrypoint\"\nkind = \"files\"\ntitle = \"t\"\ndelete = [\"/usr/local/Ascend/mindie/latest/old.sh\"]\n[[files]]\npath = \"/usr/local/Ascend/mindie/latest/mindie-service/bin/mindieservice_daemon\"\nsource = \"daemon\"\nmode = 0o755\n";

/// A rootfs where `latest` is the link `target` to the real `8.3.RC1`.
fn rootfs(root: &Path, target: &str) {
    let real = root.join("usr/local/Ascend/mindie/8.3.RC1/mindie-service/bin");
    std::fs::create_dir_all(&real).expect("mkdir");
    std::fs::write(real.join("mindieservice_daemon"), b"#!/bin/sh\nold\n").expect("write");
    std::fs::set_permissions(
        real.join("mindieservice_daemon"),
        std::fs::Permissions::from_mode(0o550),
    )
    .expect("chmod");
    std::fs::write(root.join("usr/local/Ascend/mindie/8.3.RC1/old.sh"), b"old").expect("write");
    symlink(target, root.join("usr/local/Ascend/mindie/latest")).expect("symlink");
}

#[test]
fn placed_through_a_link_written_at_the_real_path_then_already_patched() {
    for target in ["8.3.RC1", "/usr/local/Ascend/mindie/8.3.RC1"] {
        let work = tempfile::tempdir().expect("tmp");
        let root = work.path().join("rootfs");
        rootfs(&root, target);
        let p = folder(
            &work.path().join("p"),
            TOML,
            &[("daemon", b"#!/bin/sh\nnew\n")],
        )
        .expect("loads");
        let tree = DirTree::open(&root).expect("tree");
        let v = p.decide(&tree);
        assert_eq!(v.outcome, Outcome::Patched, "{}", v.reason);
        let paths: Vec<&str> = v.changes.iter().map(Change::path).collect();
        assert_eq!(
            paths,
            [REAL, "usr/local/Ascend/mindie/8.3.RC1/old.sh"],
            "written and deleted at the real paths, never through the link"
        );
        assert!(
            v.reason.contains(&format!(
                "/{DAEMON} (= /{REAL} through /usr/local/Ascend/mindie/latest -> {target})"
            )),
            "{}",
            v.reason
        );
        assert_eq!(v.about.file.as_deref(), Some(format!("/{REAL}").as_str()));
        write_changes(&root, &v.changes).expect("write");
        let m = std::fs::metadata(root.join(REAL)).expect("stat");
        assert_eq!(m.permissions().mode() & 0o7777, 0o755);
        assert!(
            std::fs::symlink_metadata(root.join("usr/local/Ascend/mindie/latest"))
                .expect("link")
                .file_type()
                .is_symlink()
        );
        let again = p.decide(&DirTree::open(&root).expect("tree"));
        assert_eq!(again.outcome, Outcome::AlreadyPatched, "{}", again.reason);
    }
}

#[test]
fn another_mode_or_owner_is_a_change_and_created_files_are_root_owned() {
    let work = tempfile::tempdir().expect("tmp");
    let root = work.path().join("rootfs");
    rootfs(&root, "8.3.RC1");
    std::fs::write(root.join(REAL), b"same\n").expect("write");
    let toml = TOML.replace("0o755", "0o550\nuid = 1000\ngid = 1001");
    let p = folder(&work.path().join("p"), &toml, &[("daemon", b"same\n")]).expect("loads");
    let v = p.decide(&DirTree::open(&root).expect("tree"));
    assert_eq!(
        v.outcome,
        Outcome::Patched,
        "the owner differs: {}",
        v.reason
    );
    let Change::Write(e) = &v.changes[0] else {
        panic!("a write")
    };
    assert_eq!((e.uid, e.gid, e.mode), (1000, 1001, 0o550));
    let new = "id = \"hpcx\"\nkind = \"files\"\ntitle = \"t\"\n[[files]]\npath = \"/etc/ld.so.conf.d/hpcx.conf\"\nsource = \"hpcx.conf\"\nmode = 0o644\n";
    let p = folder(
        &work.path().join("q"),
        new,
        &[("hpcx.conf", b"/opt/hpcx/ucx/lib\n")],
    )
    .expect("loads");
    let v = p.decide(&DirTree::open(&root).expect("tree"));
    let Change::Write(e) = &v.changes[0] else {
        panic!("a write")
    };
    assert_eq!(
        (e.path.as_str(), e.uid, e.gid, e.mode),
        ("etc/ld.so.conf.d/hpcx.conf", 0, 0, 0o644)
    );
    assert!(v.reason.contains("created"), "{}", v.reason);
}

#[test]
fn links_out_of_the_root_loops_and_links_at_the_file_are_refused() {
    let cases = [
        (
            "../../../../../../opt/elsewhere",
            "leads out of the image root",
        ),
        ("latest", "loops"),
    ];
    for (target, expect) in cases {
        let work = tempfile::tempdir().expect("tmp");
        let root = work.path().join("rootfs");
        std::fs::create_dir_all(root.join("usr/local/Ascend/mindie")).expect("mkdir");
        symlink(target, root.join("usr/local/Ascend/mindie/latest")).expect("symlink");
        let p = folder(&work.path().join("p"), TOML, &[("daemon", b"x")]).expect("loads");
        let v = p.decide(&DirTree::open(&root).expect("tree"));
        assert_eq!(v.outcome, Outcome::Refused);
        assert!(v.reason.contains(expect), "{target}: {}", v.reason);
        assert!(v.changes.is_empty());
    }
    let work = tempfile::tempdir().expect("tmp");
    let root = work.path().join("rootfs");
    rootfs(&root, "8.3.RC1");
    std::fs::remove_file(root.join(REAL)).expect("rm");
    symlink("mindieservice_daemon_", root.join(REAL)).expect("symlink");
    let p = folder(&work.path().join("p"), TOML, &[("daemon", b"x")]).expect("loads");
    let v = p.decide(&DirTree::open(&root).expect("tree"));
    assert_eq!(v.outcome, Outcome::Refused);
    assert!(
        v.reason
            .contains("is a symbolic link to \"mindieservice_daemon_\""),
        "{}",
        v.reason
    );
}

#[test]
fn a_placed_module_hides_its_bytecode() {
    let work = tempfile::tempdir().expect("tmp");
    let root = work.path().join("rootfs");
    let models = root.join("usr/local/Ascend/atb-models/atb_llm/models/minicpm_qwen2_v2");
    std::fs::create_dir_all(models.join("__pycache__")).expect("mkdir");
    std::fs::write(
        models.join("__pycache__/resampler.cpython-311.pyc"),
        b"stale",
    )
    .expect("pyc");
    let toml = "id = \"r\"\nkind = \"files\"\ntitle = \"t\"\n[[files]]\npath = \"/usr/local/Ascend/atb-models/atb_llm/models/minicpm_qwen2_v2/resampler.py\"\nsource = \"resampler.py\"\nmode = 0o550\n";
    let p = folder(
        &work.path().join("p"),
        toml,
        &[("resampler.py", b"X = 1\n")],
    )
    .expect("loads");
    let v = p.decide(&DirTree::open(&root).expect("tree"));
    let hidden: Vec<&str> = v
        .changes
        .iter()
        .filter(|c| matches!(c, Change::Whiteout(_)))
        .map(Change::path)
        .collect();
    assert_eq!(
        hidden,
        ["usr/local/Ascend/atb-models/atb_llm/models/minicpm_qwen2_v2/__pycache__/resampler.cpython-311.pyc"]
    );
}

#[test]
fn bad_folders_name_file_and_line() {
    let work = tempfile::tempdir().expect("tmp");
    let cases = [
        (
            TOML.replace("0o755", "0o17777"),
            "patch.toml:5: [[files]] mode 8191 is not a permission mode",
        ),
        (
            TOML.replace("path = \"/usr", "path = \"usr"),
            "patch.toml:5: [[files]] path: \"usr/",
        ),
        (
            TOML.replace(
                "latest/old.sh",
                "latest/mindie-service/bin/mindieservice_daemon",
            ),
            "is named twice",
        ),
        (
            TOML.replace("latest/old.sh", "latest"),
            "lies below /usr/local/Ascend/mindie/latest, which the patch also names",
        ),
        (TOML.replace("daemon\"", "missing\""), "cannot read"),
        (
            TOML.replace("mode = 0o755", "mode = 0o755\nowner = 1"),
            "unknown field `owner`",
        ),
        (
            "id = \"x\"\nkind = \"files\"\ntitle = \"t\"\n".to_owned(),
            "places no [[files]] and deletes nothing",
        ),
    ];
    for (i, (toml, expect)) in cases.iter().enumerate() {
        let e = folder(
            &work.path().join(format!("p{i}")),
            toml,
            &[("daemon", b"x")],
        )
        .expect_err("refused");
        assert!(e.contains(expect), "{e} should say {expect:?}");
    }
}
