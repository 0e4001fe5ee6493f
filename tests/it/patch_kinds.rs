//! Patch kinds and `--patch` values: every patch named is validated before any registry is
//! touched, and a `diff` patch on an unpacked fixture image gives the file `apply` writes.

use std::path::Path;

use crate::harness::{root, unpack, Registry, Tool};

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
        let run = Tool::new(cmd)
            .cwd(work.path())
            .backend("cuda")
            .repo(reg.repo())
            .tag("cuda12.9-vllm0.27.1")
            .patch(&bad)
            .run();
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
    let run = Tool::new("patches")
        .cwd(work.path())
        .json()
        .patch(examples.join("observe-diff-data"))
        .patch(examples.join("nccl-p2p-off"))
        .run();
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
    let run = Tool::new("patch-dir")
        .cwd(work.path())
        .arg(&rootfs)
        .patch(&diff)
        .json()
        .run();
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

    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tag(tag)
        .json()
        .run();
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
    let again = Tool::new("patch-dir")
        .cwd(work.path())
        .arg(&patched_rootfs)
        .patch(&diff)
        .run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout.contains("already-patched"), "{}", again.stdout);
}

/// Every file under `dir` whose path ends with `suffix`.
fn find_files(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
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
}

const BASE: &str = "vllm/distributed/kv_transfer/kv_connector/v1/base.py";

/// A `diff` patch made with GNU diff against the fixture's `base.py` (one appended line), and
/// the bytes GNU patch gives for it.
fn base_diff_patch(work: &Path, rootfs: &Path) -> (String, Vec<u8>) {
    let found = find_files(rootfs, BASE);
    assert_eq!(found.len(), 1, "{found:?}");
    let original = std::fs::read(&found[0]).expect("read base.py");
    let mut changed = original.clone();
    changed.extend_from_slice(b"# stacked by runner-patch's tests\n");
    let tree = work.join("diff-src");
    for (side, bytes) in [("a", &original), ("b", &changed)] {
        let p = tree.join(side).join(BASE);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, bytes).expect("write");
    }
    let out = std::process::Command::new("diff")
        .current_dir(&tree)
        .args(["-u", &format!("a/{BASE}"), &format!("b/{BASE}")])
        .output()
        .expect("GNU diff runs");
    assert_eq!(out.status.code(), Some(1), "diff finds the change");
    let dir = folder(
        work,
        "base-note",
        "id = \"base-note\"\nkind = \"diff\"\ntitle = \"a note in base.py\"\nservices = [\"vllm\"]\npackage = \"vllm\"\ndiff = \"fix.patch\"\n",
        Some(&String::from_utf8(out.stdout).expect("utf8")),
    );
    (dir, changed)
}

/// How many layers each platform of a tag has, as skopeo reads the registry.
fn layer_counts(reference: &str) -> Vec<usize> {
    platform_manifests(reference)
        .iter()
        .map(|m| m["layers"].as_array().expect("layers").len())
        .collect()
}

fn platform_manifests(reference: &str) -> Vec<serde_json::Value> {
    let index: serde_json::Value =
        serde_json::from_slice(&crate::harness::skopeo_raw(reference)).expect("index");
    let repo = reference.rsplit_once(':').expect("tag").0;
    index["manifests"]
        .as_array()
        .expect("children")
        .iter()
        .map(|m| {
            let d = m["digest"].as_str().expect("digest");
            serde_json::from_slice(&crate::harness::skopeo_raw(&format!("{repo}@{d}")))
                .expect("manifest")
        })
        .collect()
}

#[test]
fn stacked_patches_get_one_layer_each_and_verify_and_roll_back() {
    let reg = Registry::start();
    reg.seed(&["cuda12.9-vllm0.27.1"]);
    let work = tempfile::tempdir().expect("tmp");
    let tag = "cuda12.9-vllm0.27.1";
    let reference = format!("{}:{tag}", reg.repo());
    let original_digest = crate::harness::served(&reference);
    let original_layers: Vec<usize> = layer_counts(&reference);
    let (rootfs, _) = unpack(&reference, "amd64", &work.path().join("orig"));
    let (diff, expected_base) = base_diff_patch(work.path(), &rootfs);
    let env = root().join("examples/patches/nccl-p2p-off");
    let env = env.to_str().expect("utf8");
    let patches = ["multiconnector-observe", diff.as_str(), env];
    let apply = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tag(tag)
        .json();
    let stacked = patches.iter().fold(apply.clone(), |t, p| t.patch(p));

    let run = stacked.run();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let map = run.json();
    assert_eq!(
        map["patch"],
        "multiconnector-observe,base-note,nccl-p2p-off"
    );
    for p in map["images"][0]["platforms"].as_array().expect("platforms") {
        let steps = p["patches"].as_array().expect("per-patch records");
        let ids: Vec<&str> = steps
            .iter()
            .map(|s| s["id"].as_str().expect("id"))
            .collect();
        assert_eq!(
            ids,
            ["multiconnector-observe", "base-note", "nccl-p2p-off"],
            "{p}"
        );
        assert!(steps.iter().all(|s| s["outcome"] == "patched"), "{p}");
        assert!(steps[0]["layer"]["digest"].is_string() && steps[1]["layer"]["digest"].is_string());
        assert!(
            steps[2]["layer"].is_null(),
            "an env patch adds no layer: {p}"
        );
    }
    // Two layers on every platform (one per file patch), as skopeo reads the registry.
    let after: Vec<usize> = layer_counts(&reference);
    assert_eq!(
        after,
        original_layers.iter().map(|n| n + 2).collect::<Vec<_>>()
    );
    let config = crate::harness::skopeo_config(&reference);
    assert_eq!(
        config["config"]["Labels"]["dev.runner-patch.patches"],
        "multiconnector-observe,base-note,nccl-p2p-off"
    );
    let env_list = config["config"]["Env"].as_array().expect("Env");
    assert!(
        env_list.iter().any(|e| e == "NCCL_P2P_DISABLE=1"),
        "{env_list:?}"
    );
    assert_eq!(
        config["history"]
            .as_array()
            .expect("history")
            .last()
            .expect("entry")["empty_layer"],
        true
    );
    // umoci sees both files changed: base.py exactly as GNU diff's other side.
    let (patched, _) = unpack(&reference, "amd64", &work.path().join("patched"));
    let base = find_files(&patched, BASE);
    assert_eq!(std::fs::read(&base[0]).expect("read"), expected_base);
    let target = find_files(&patched, TARGET);
    assert!(
        String::from_utf8_lossy(&std::fs::read(&target[0]).expect("read"))
            .contains("# runner-patch multiconnector-observe")
    );

    let map_path = work.path().join("runner-patch-manifest.json");
    let on_map = |command: &str| Tool::new(command).cwd(work.path()).digest_map(&map_path);
    let v = patches
        .iter()
        .fold(on_map("verify"), |t, p| t.patch(p))
        .run();
    assert_eq!(v.code, 0, "{}\n{}", v.stdout, v.stderr);
    // A re-run finds every patch applied.
    let again = stacked.run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.json()["images"][0]["outcome"], "already-patched");

    let rb = on_map("rollback").run();
    assert_eq!(rb.code, 0, "{}\n{}", rb.stdout, rb.stderr);
    assert_eq!(crate::harness::served(&reference), original_digest);

    // The second patch alone on an image carrying the first: one more layer, both kept.
    std::fs::remove_file(&map_path).expect("rm map");
    let first = apply.clone().patch("multiconnector-observe").run();
    assert_eq!(first.code, 0, "{}", first.stderr);
    let after_first = crate::harness::served(&reference);
    std::fs::remove_file(&map_path).expect("rm map");
    let second = apply.patch(&diff).run();
    assert_eq!(second.code, 0, "{}", second.stderr);
    let rec = &second.json()["images"][0];
    assert_eq!(
        rec["original_digest"],
        after_first.as_str(),
        "the run's own starting point"
    );
    let layers: Vec<usize> = layer_counts(&reference);
    assert_eq!(
        layers,
        original_layers.iter().map(|n| n + 2).collect::<Vec<_>>()
    );
    let config = crate::harness::skopeo_config(&reference);
    assert_eq!(
        config["config"]["Labels"]["dev.runner-patch.patches"],
        "multiconnector-observe,base-note"
    );
    let v = on_map("verify").patch(&diff).run();
    assert_eq!(v.code, 0, "{}\n{}", v.stdout, v.stderr);
    let rb = on_map("rollback").run();
    assert_eq!(rb.code, 0, "{}", rb.stderr);
    assert_eq!(crate::harness::served(&reference), after_first);
}
