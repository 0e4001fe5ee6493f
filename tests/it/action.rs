//! The composite action (`action.yml`): a workflow that uses it from the checkout (`uses: ./`)
//! run step by step by `tests/support/run_workflow.py` against a local registry: plan, the
//! gate, apply, verify, the digest map path as an output; and a downloaded release whose
//! sha256 does not match is refused before it runs.

use std::path::Path;

use serde_json::Value;

use crate::harness::*;
use crate::pipeline_ci::{job, run_workflow, serve_dir};

const TAGS: &[&str] = &["cuda12.9-vllm0.27.1", "cuda13.0-vllm0.30.0"];

/// What skopeo says the tag's manifest digest is.
fn served(reg: &Registry, tag: &str) -> String {
    sha256_hex(&skopeo_raw(&format!("{}:{tag}", reg.repo())))
}

/// Runs the test workflow; the exit status, the log and the report.
fn run(reg: &Registry, work: &Path, extra: &[String], path: Option<&Path>) -> (i32, String, Value) {
    let mut cmd = python("tests.support.run_workflow");
    cmd.arg(root().join("tests/workflows/action-local.yml"))
        .arg("--work")
        .arg(work.join("wf"))
        .arg("--checkout")
        .arg(root())
        .arg("--input")
        .arg(format!("repository={}", reg.repo()))
        .arg("--input")
        .arg(format!("tags={}", TAGS.join(" ")));
    for e in extra {
        cmd.arg("--input").arg(e);
    }
    if let Some(p) = path {
        cmd.arg("--path").arg(p);
    }
    run_workflow(&mut cmd, &work.join("wf"))
}

/// A release page holding the binary and a sha256 file (the right one, or a wrong one).
fn release(work: &Path, right: bool) -> String {
    let dir = work.join("release/v0.1.0");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let bin = std::fs::read(env!("CARGO_BIN_EXE_runner-patch")).expect("binary");
    std::fs::write(dir.join("runner-patch-linux-amd64"), &bin).expect("write");
    let sum = if right {
        sha256_hex(&bin).trim_start_matches("sha256:").to_owned()
    } else {
        sha256_hex(b"another binary")
            .trim_start_matches("sha256:")
            .to_owned()
    };
    std::fs::write(
        dir.join("runner-patch-linux-amd64.sha256"),
        format!("{sum}  runner-patch-linux-amd64\n"),
    )
    .expect("write");
    format!("http://{}", serve_dir(work.join("release")))
}

#[test]
fn the_action_from_the_checkout_plans_applies_and_verifies_and_outputs_the_map() {
    let reg = Registry::start();
    reg.seed(TAGS);
    let before: Vec<String> = TAGS.iter().map(|t| served(&reg, t)).collect();
    let work = tempfile::tempdir().expect("tmp");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_runner-patch"))
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let (code, log, report) = run(&reg, work.path(), &[], Some(&bin_dir));
    assert_eq!(code, 0, "{log}");
    for id in ["plan", "apply"] {
        assert_eq!(job(&report, id)["result"], "success", "{report}");
    }
    assert_eq!(job(&report, "plan")["outputs"]["exit-code"], "0");
    // The output names the map apply wrote, in the job's workspace.
    let map_rel = job(&report, "apply")["outputs"]["digest-map"]
        .as_str()
        .expect("digest-map output")
        .to_owned();
    assert_eq!(map_rel, "runner-patch-manifest.json");
    let map_path = work.path().join("wf/jobs/apply/workspace").join(&map_rel);
    let map: Value =
        serde_json::from_slice(&std::fs::read(&map_path).expect("map")).expect("map json");
    let images = map["images"].as_array().expect("images");
    assert_eq!(images.len(), TAGS.len(), "{map}");
    for (tag, old) in TAGS.iter().zip(&before) {
        let now = served(&reg, tag);
        assert_ne!(&now, old, "{tag} moved");
        let img = images
            .iter()
            .find(|i| {
                i["target"]
                    .as_str()
                    .is_some_and(|t| t.ends_with(&format!(":{tag}")))
            })
            .unwrap_or_else(|| panic!("no record of {tag} in {map}"));
        assert_eq!(img["patched_digest"].as_str(), Some(now.as_str()));
        assert_eq!(img["original_digest"].as_str(), Some(old.as_str()));
    }
    // The plan's job summary is what the binary wrote into GITHUB_STEP_SUMMARY.
    let summary = std::fs::read_to_string(work.path().join("wf/summary-plan.md")).expect("summary");
    for tag in TAGS {
        assert!(summary.contains(tag), "{summary}");
    }
}

#[test]
fn a_release_whose_sha256_does_not_match_never_runs() {
    let reg = Registry::start();
    reg.seed(TAGS);
    let before = served(&reg, TAGS[0]);
    let work = tempfile::tempdir().expect("tmp");
    let url = release(work.path(), false);
    let (code, log, report) = run(
        &reg,
        work.path(),
        &["version=0.1.0".into(), format!("release-url={url}")],
        None,
    );
    assert_ne!(code, 0, "{log}");
    assert_eq!(job(&report, "plan")["result"], "failure", "{report}");
    assert!(
        log.contains("FAILED"),
        "sha256sum names the mismatch: {log}"
    );
    assert_eq!(served(&reg, TAGS[0]), before, "nothing moved");
    // The same release with its right sha256 is installed and runs.
    let work = tempfile::tempdir().expect("tmp");
    let url = release(work.path(), true);
    let (code, log, report) = run(
        &reg,
        work.path(),
        &["version=0.1.0".into(), format!("release-url={url}")],
        None,
    );
    assert_eq!(code, 0, "{log}");
    assert_eq!(job(&report, "apply")["result"], "success", "{report}");
    assert_ne!(
        served(&reg, TAGS[0]),
        before,
        "applied with the downloaded binary"
    );
}
