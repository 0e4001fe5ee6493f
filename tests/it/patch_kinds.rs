//! Patch kinds and `--patch` values: every patch named is validated before any registry is
//! touched, and a `diff` patch on an unpacked fixture image gives the file `apply` writes.

use std::path::Path;

use crate::harness::{apply, cli, root, unpack, Registry};

const TARGET: &str = "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py";

fn folder(dir: &Path, name: &str, toml: &str, diff: Option<&str>) -> String {
    let f = dir.join(name);
    std::fs::create_dir_all(&f).expect("mkdir");
    std::fs::write(f.join("patch.toml"), toml).expect("write");
    if let Some(d) = diff {
        std::fs::write(f.join("fix.patch"), d).expect("write");
    }
    f.display().to_string()
}

#[test]
fn bad_patch_stops_the_run_before_any_registry_request() {
    let reg = Registry::start();
    let work = tempfile::tempdir().expect("tmp");
    let bad = folder(
        work.path(),
        "bad",
        "id = \"bad\"\nkind = \"diff\"\ntitle = \"t\"\npackage = \"vllm\"\ndiff = \"fix.patch\"\n",
        Some("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,3 +1,3 @@\n a\n-b\n"),
    );
    let before = reg.log().len();
    for cmd in ["plan", "apply"] {
        let run = cli(
            work.path(),
            &[
                cmd,
                "--backend",
                "cuda",
                "--repository",
                &reg.repo(),
                "--tag",
                "cuda12.9-vllm0.27.1",
                "--patch",
                &bad,
            ],
        );
        assert_eq!(run.code, 2, "{cmd}: {}", run.stderr);
        assert!(
            run.stderr
                .contains(&format!("{bad}/fix.patch:3: hunk ends early")),
            "{cmd}: the error names the diff file and line: {}",
            run.stderr
        );
    }
    assert_eq!(reg.log().len(), before, "no request reached the registry");
    assert!(!work.path().join("runner-patch-manifest.json").exists());
}

#[test]
fn patches_lists_catalogue_and_folders() {
    let work = tempfile::tempdir().expect("tmp");
    let examples = root().join("examples/patches");
    let run = cli(
        work.path(),
        &[
            "patches",
            "--json",
            "--patch",
            &examples.join("observe-diff-data").display().to_string(),
            "--patch",
            &examples.join("nccl-p2p-off").display().to_string(),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let list = run.json();
    let kinds: Vec<(&str, &str)> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|p| {
            (
                p["id"].as_str().expect("id"),
                p["kind"].as_str().expect("kind"),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("multiconnector-observe", "shapes"),
            ("observe-diff-data", "diff"),
            ("nccl-p2p-off", "env")
        ]
    );
    assert_eq!(list[1]["files"][0], TARGET);
}

#[test]
fn diff_patch_on_unpacked_image_gives_what_apply_writes() {
    let reg = Registry::start();
    reg.seed(&["cuda12.9-vllm0.27.1"]);
    let work = tempfile::tempdir().expect("tmp");
    let tag = "cuda12.9-vllm0.27.1";
    let (rootfs, _) = unpack(
        &format!("{}:{tag}", reg.repo()),
        "amd64",
        &work.path().join("orig"),
    );
    let find = |dir: &Path, suffix: &str| -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() && !p.is_symlink() {
                    stack.push(p);
                } else if p.to_string_lossy().ends_with(suffix) {
                    out.push(p);
                }
            }
        }
        out
    };
    let pycs_before = find(&rootfs, ".pyc")
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("__pycache__/multi_connector."))
        .count();
    assert!(
        pycs_before > 0,
        "the fixture has stale bytecode of the module"
    );
    let diff = root().join("examples/patches/observe-diff-data");
    let run = cli(
        work.path(),
        &[
            "patch-dir",
            &rootfs.display().to_string(),
            "--patch",
            &diff.display().to_string(),
            "--json",
        ],
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(report["patches"][0]["outcome"], "patched", "{report}");
    let whiteouts = report["patches"][0]["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter(|c| c["action"] == "whiteout")
        .count();
    assert_eq!(
        whiteouts, pycs_before,
        "every visible pyc of the module is hidden: {report}"
    );
    assert!(
        find(&rootfs, ".pyc")
            .iter()
            .all(|p| !p.to_string_lossy().contains("__pycache__/multi_connector.")),
        "no stale bytecode left"
    );

    let run = apply(&reg, work.path(), "cuda", &[tag], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (patched_rootfs, _) = unpack(
        &format!("{}:{tag}", reg.repo()),
        "amd64",
        &work.path().join("patched"),
    );
    let ours = find(&rootfs, TARGET);
    let theirs = find(&patched_rootfs, TARGET);
    assert_eq!((ours.len(), theirs.len()), (1, 1), "{ours:?} {theirs:?}");
    assert_eq!(
        std::fs::read(&ours[0]).expect("read"),
        std::fs::read(&theirs[0]).expect("read"),
        "the diff patch and apply's shapes patch write the same bytes"
    );
    let again = cli(
        work.path(),
        &[
            "patch-dir",
            &patched_rootfs.display().to_string(),
            "--patch",
            &diff.display().to_string(),
        ],
    );
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout.contains("already-patched"), "{}", again.stdout);
}
