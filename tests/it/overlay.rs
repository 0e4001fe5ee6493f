//! The overlay model and hostile layers: images whose top layer shadows the target (a symlink,
//! a file or a whiteout at an ancestor), kept-file bombs, and unsafe tar paths. Each crafted
//! image is pushed to the real registry by `fixtures/craft.py`; every refusal is exit 1 with
//! nothing pushed, and umoci (which we did not write) confirms what the container sees.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

const TAG: &str = "rocm7.2-vllm0.25.1";
const SITE: &str = "usr/local/lib/python3.12/dist-packages";
const TARGET: &str = "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py";

/// Pushes `from` with one crafted layer on top under `out_tag` (see fixtures/craft.py).
fn craft(reg: &Registry, from: &str, how: &str, out_tag: &str, extra: &[&str]) -> Value {
    let out = python("fixtures.craft")
        .args([
            "--registry",
            &reg.addr,
            "--repository",
            REPO,
            "--tag",
            from,
            "--how",
            how,
            "--out-tag",
            out_tag,
        ])
        .args(extra)
        .output()
        .expect("run fixtures.craft");
    assert!(
        out.status.success(),
        "craft.py {how} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("craft.py json")
}

/// True when `path` is a regular file in `rootfs` reached through directories only (no link
/// followed), as the container would see it.
fn visible_file(rootfs: &Path, path: &str) -> bool {
    let mut p = rootfs.to_path_buf();
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        p.push(part);
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            return false;
        };
        let last = i + 1 == parts.len();
        if (last && !m.file_type().is_file()) || (!last && !m.file_type().is_dir()) {
            return false;
        }
    }
    true
}

/// `apply` on a crafted tag: refused (exit 1), the reason holds every `expect`, nothing pushed.
fn assert_refused(reg: &Registry, tag: &str, expect: &[&str]) -> Value {
    let work = tempfile::tempdir().expect("tmp");
    let before = reg.storage();
    let run = apply_rocm(reg, work.path(), tag).run();
    assert_eq!(run.code, 1, "{tag}: {}\n{}", run.stdout, run.stderr);
    let map = run.json();
    let img = &map["images"][0];
    assert_eq!(img["outcome"], "refused", "{img}");
    assert_eq!(img["patched_digest"], Value::Null);
    let reason = img["reason"].as_str().expect("reason");
    for e in expect {
        assert!(reason.contains(e), "{tag}: expected {e:?} in {reason:?}");
    }
    assert_eq!(
        reg.storage(),
        before,
        "{tag}: a refused image pushed something"
    );
    map
}

/// Crafts `how` at `at` over the original tag, checks `apply` refuses it and umoci does not
/// see the target in it.
fn shadowed_original_is_refused(how: &str, at: &str, expect: &[&str]) {
    let reg = Registry::start();
    let fixture = reg.seed(&[TAG]);
    assert!(fixture["images"][TAG].is_object(), "{fixture}");
    let out_tag = format!("{TAG}-{how}");
    let crafted = craft(&reg, TAG, how, &out_tag, &["--at", at]);
    let layer = crafted["layer"].as_str().expect("layer").to_owned();
    let mut expect: Vec<&str> = expect.to_vec();
    expect.push(&layer);
    assert_refused(&reg, &out_tag, &expect);
    // umoci agrees: the container has no regular file at the target path.
    let work = tempfile::tempdir().expect("tmp");
    let (rootfs, _) = unpack(&format!("{}:{out_tag}", reg.repo()), "amd64", work.path());
    assert!(
        !visible_file(&rootfs, &format!("{SITE}/{TARGET}")),
        "umoci shows the target in the {how} image"
    );
    // ... while the original image shows it.
    let (rootfs, _) = unpack(
        &format!("{}:{TAG}", reg.repo()),
        "amd64",
        &work.path().join("orig"),
    );
    assert!(visible_file(&rootfs, &format!("{SITE}/{TARGET}")));
}

#[test]
fn symlink_at_the_package_directory_is_refused() {
    shadowed_original_is_refused(
        "symlink",
        &format!("{SITE}/vllm"),
        &[
            &format!("/{SITE}/{TARGET}"),
            &format!("is shadowed by a symbolic link at /{SITE}/vllm"),
        ],
    );
}

#[test]
fn regular_file_at_an_ancestor_is_refused() {
    shadowed_original_is_refused(
        "file",
        &format!("{SITE}/vllm/distributed"),
        &[&format!(
            "is shadowed by a regular file at /{SITE}/vllm/distributed"
        )],
    );
}

#[test]
fn whiteout_of_an_ancestor_is_refused() {
    shadowed_original_is_refused(
        "whiteout",
        &format!("{SITE}/vllm"),
        &[
            "no layer holds a visible",
            &format!("is hidden by a whiteout of /{SITE}/vllm"),
        ],
    );
}

#[test]
fn opaque_ancestor_directory_is_refused() {
    shadowed_original_is_refused(
        "opaque",
        &format!("{SITE}/vllm/distributed"),
        &[
            "no layer holds a visible",
            &format!("is hidden by the opaque directory /{SITE}/vllm/distributed"),
        ],
    );
}

/// Applies the patch, shadows the patched file with `how` at `at` in a new top layer, and
/// checks that `verify` fails naming the file and what shadows it.
fn patched_then_shadowed_fails_verify(how: &str, at: &str, expect: &str) {
    let reg = Registry::start();
    reg.seed(&[TAG]);
    let work = tempfile::tempdir().expect("tmp");
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("rocm")
        .repo(reg.repo())
        .tag(TAG)
        .json()
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let ok = Tool::new("verify")
        .cwd(work.path())
        .arg(format!("{}:{TAG}", reg.repo()))
        .run();
    assert_eq!(ok.code, 0, "the patched image verifies: {}", ok.stdout);
    let out_tag = format!("{TAG}-patched-{how}");
    craft(&reg, TAG, how, &out_tag, &["--at", at]);
    let v = Tool::new("verify")
        .cwd(work.path())
        .json()
        .arg(format!("{}:{out_tag}", reg.repo()))
        .run();
    assert_eq!(
        v.code, 1,
        "verify passed a shadowed image: {}{}",
        v.stdout, v.stderr
    );
    let problems: Vec<String> = v.json()["images"][0]["platforms"][0]["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|p| p.as_str().unwrap_or_default().to_owned())
        .collect();
    let file = format!("/{SITE}/{TARGET}");
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&file) && p.contains(expect)),
        "no problem names {file} and {expect:?}: {problems:#?}"
    );
    // umoci: the patched file is gone from the container's view.
    let (rootfs, _) = unpack(&format!("{}:{out_tag}", reg.repo()), "amd64", work.path());
    assert!(!visible_file(&rootfs, &format!("{SITE}/{TARGET}")));
}

#[test]
fn verify_names_a_patched_file_shadowed_by_a_symlink() {
    patched_then_shadowed_fails_verify(
        "symlink",
        &format!("{SITE}/vllm"),
        &format!("is shadowed by a symbolic link at /{SITE}/vllm"),
    );
}

#[test]
fn verify_names_a_patched_file_shadowed_by_a_file() {
    patched_then_shadowed_fails_verify(
        "file",
        &format!("{SITE}/vllm/distributed/kv_transfer"),
        &format!("is shadowed by a regular file at /{SITE}/vllm/distributed/kv_transfer"),
    );
}

#[test]
fn verify_names_a_patched_file_hidden_by_a_whiteout() {
    patched_then_shadowed_fails_verify(
        "whiteout",
        &format!("{SITE}/vllm/distributed"),
        &format!("is hidden by a whiteout of /{SITE}/vllm/distributed"),
    );
}

/// `apply --json` of `tag` (rocm) in `work`, its map in `m.json`.
fn apply_rocm(reg: &Registry, work: &Path, tag: &str) -> Tool {
    Tool::new("apply")
        .cwd(work)
        .backend("rocm")
        .repo(reg.repo())
        .tag(tag)
        .json()
        .digest_map("m.json")
}

/// `apply` under `/usr/bin/time`: the run and its peak resident memory in KiB.
fn apply_measured(reg: &Registry, work: &Path, tag: &str) -> (Run, u64) {
    let m = apply_rocm(reg, work, tag).measured(Duration::from_secs(600));
    (m.run, m.rss_kib)
}

const MIB: u64 = 1024 * 1024;
const RSS_LIMIT_KIB: u64 = 100 * 1024;

/// A ~1 MiB layer inflating to about 1 GiB of kept files: refused, within 100 MiB.
fn bomb_is_refused_within_memory(how: &str) {
    let reg = Registry::start();
    reg.seed(&[TAG]);
    let out_tag = format!("{TAG}-{how}");
    let size = (8 * MIB).to_string();
    let crafted = craft(
        &reg,
        TAG,
        how,
        &out_tag,
        &["--count", "128", "--size", &size],
    );
    let layer_size = crafted["layer_size"].as_u64().expect("size");
    assert!(
        layer_size < 2 * MIB,
        "the bomb is small: {layer_size} bytes"
    );
    let work = tempfile::tempdir().expect("tmp");
    let before = reg.storage();
    let (run, rss) = apply_measured(&reg, work.path(), &out_tag);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let img = &run.json()["images"][0];
    assert_eq!(img["outcome"], "refused");
    let reason = img["reason"].as_str().expect("reason");
    assert!(
        reason.contains(crafted["layer"].as_str().expect("layer"))
            && reason.contains("kept per layer"),
        "{reason}"
    );
    assert!(rss < RSS_LIMIT_KIB, "peak RSS {rss} KiB on a {how}");
    assert_eq!(reg.storage(), before, "a refused image pushed something");
}

#[test]
fn metadata_bomb_is_refused_within_memory() {
    bomb_is_refused_within_memory("metadata-bomb");
}

#[test]
fn target_copies_bomb_is_refused_within_memory() {
    bomb_is_refused_within_memory("target-bomb");
}

#[test]
fn a_few_large_kept_files_are_fine_within_memory() {
    let reg = Registry::start();
    reg.seed(&[TAG]);
    let out_tag = format!("{TAG}-some-metadata");
    let size = (2 * MIB).to_string();
    craft(
        &reg,
        TAG,
        "metadata-bomb",
        &out_tag,
        &["--count", "4", "--size", &size],
    );
    let work = tempfile::tempdir().expect("tmp");
    let (run, rss) = apply_measured(&reg, work.path(), &out_tag);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.json()["images"][0]["outcome"], "patched");
    assert!(rss < RSS_LIMIT_KIB, "peak RSS {rss} KiB");
}

#[test]
fn kept_bytes_are_capped_per_run() {
    // Three layers of 2 x 8 MiB kept files (other paths in each): each under the per-layer
    // cap, 48 MiB and more together.
    let reg = Registry::start();
    reg.seed(&[TAG]);
    let size = (8 * MIB).to_string();
    let mut from = TAG.to_owned();
    for i in 0..3 {
        let out_tag = format!("{TAG}-kept-{i}");
        let first = (2 * i).to_string();
        craft(
            &reg,
            &from,
            "metadata-bomb",
            &out_tag,
            &["--count", "2", "--size", &size, "--first", &first],
        );
        from = out_tag;
    }
    let work = tempfile::tempdir().expect("tmp");
    let before = reg.storage();
    let (run, rss) = apply_measured(&reg, work.path(), &from);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let reason = run.json()["images"][0]["reason"]
        .as_str()
        .expect("reason")
        .to_owned();
    assert!(reason.contains("kept per run"), "{reason}");
    assert!(rss < RSS_LIMIT_KIB, "peak RSS {rss} KiB");
    assert_eq!(reg.storage(), before);
}

#[test]
fn dotdot_tar_path_is_a_refusal() {
    let reg = Registry::start();
    reg.seed(&[TAG]);
    let crafted = craft(&reg, TAG, "dotdot", &format!("{TAG}-dotdot"), &[]);
    assert_refused(
        &reg,
        &format!("{TAG}-dotdot"),
        &[
            crafted["layer"].as_str().expect("layer"),
            "\"../../etc/evil\" has a `..` component",
        ],
    );
}

#[test]
fn nul_in_a_tar_path_is_a_refusal() {
    let reg = Registry::start();
    reg.seed(&[TAG]);
    let crafted = craft(&reg, TAG, "nul", &format!("{TAG}-nul"), &[]);
    assert_refused(
        &reg,
        &format!("{TAG}-nul"),
        &[
            crafted["layer"].as_str().expect("layer"),
            "etc/evil\\0hidden",
            "holds a NUL byte",
        ],
    );
}

#[test]
fn platform_scans_are_bounded_by_jobs() {
    // With --jobs 1 the second child's manifest is fetched only after the first child's scan
    // has read its own layer; unbounded, every child of the index is fetched at once. The
    // order is the registry's own access log (a request is logged when it is served).
    let reg = Registry::start();
    let fixture = reg.seed(&["cuda12.9-vllm0.27.1"]);
    let plats = &fixture["images"]["cuda12.9-vllm0.27.1"]["platforms"];
    let (amd, arm) = (&plats["linux/amd64"], &plats["linux/arm64"]);
    let vllm_layer = |p: &Value| {
        let i = p["file_layer"].as_u64().expect("file_layer") as usize;
        p["layers"][i].as_str().expect("layer").to_owned()
    };
    assert_ne!(vllm_layer(amd), vllm_layer(arm), "the children differ");
    let work = tempfile::tempdir().expect("tmp");
    let log_start = reg.log().len();
    let run = Tool::new("plan")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tag("cuda12.9-vllm0.27.1")
        .args(["--jobs", "1"])
        .json()
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let log = reg.log()[log_start..].to_owned();
    let first = |needle: &str| {
        log.lines()
            .position(|l| l.contains("\"GET ") && l.contains(needle))
            .unwrap_or_else(|| panic!("no GET of {needle} in the registry log:\n{log}"))
    };
    let child = |p: &Value| format!("/manifests/{}", p["digest"].as_str().expect("digest"));
    let (x, y) = if first(&child(amd)) < first(&child(arm)) {
        (amd, arm)
    } else {
        (arm, amd)
    };
    assert!(
        first(&format!("/blobs/{}", vllm_layer(x))) < first(&child(y)),
        "the second child was fetched before the first child's scan ended:\n{log}"
    );
}
