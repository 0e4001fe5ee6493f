//! The record of originals survives every failure, kill and re-run (issue 9): the process is
//! killed at each push step (held there by the fault proxy, so the kill lands exactly on that
//! request), the digest map on disk must then name every tag that moved with its true original,
//! a re-run must complete the work (companion tags included), and `rollback` must put every tag
//! back. Digests are read with skopeo, not with this tool.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::*;

const TAG: &str = "cuda12.9-vllm0.27.1";
const AMD: &str = "cuda12.9-vllm0.27.1-linux-amd64";
const ARM: &str = "cuda12.9-vllm0.27.1-linux-arm64";

/// A registry seeded with the two-platform tag and its companions, behind a fault proxy.
struct Setup {
    reg: Registry,
    proxy: Daemon,
    work: tempfile::TempDir,
    /// tag -> the digest it served before anything ran.
    originals: Vec<(String, String)>,
}

impl Setup {
    fn new() -> Self {
        let reg = Registry::start();
        reg.seed(&[TAG]);
        let work = tempfile::tempdir().expect("tmp");
        std::fs::write(work.path().join("plan.json"), "[]").expect("plan");
        let proxy = Daemon::start(
            "fault_proxy",
            &[
                "--upstream",
                &reg.addr,
                "--plan",
                work.path().join("plan.json").to_str().expect("utf8"),
                "--log",
                work.path().join("proxy.log").to_str().expect("utf8"),
            ],
        );
        let originals = [TAG, AMD, ARM]
            .iter()
            .map(|t| (t.to_string(), served(&format!("{}:{t}", reg.repo()))))
            .collect();
        Setup {
            reg,
            proxy,
            work,
            originals,
        }
    }

    fn via(&self) -> String {
        format!("{}/gpustack/runner", self.proxy.addr())
    }

    fn map_path(&self) -> PathBuf {
        self.work.path().join("map.json")
    }

    /// Replaces the proxy's rules (atomically, so it never reads half a file).
    fn faults(&self, plan: Value) {
        let tmp = self.work.path().join("plan.json.tmp");
        std::fs::write(&tmp, plan.to_string()).expect("plan");
        std::fs::rename(&tmp, self.work.path().join("plan.json")).expect("rename");
    }

    /// `apply --json` of the tag through the proxy, recording in the setup's map.
    fn apply(&self) -> Tool {
        self.apply_to(&self.map_path())
    }

    /// `apply --json` of the tag through the proxy, recording in `map`.
    fn apply_to(&self, map: &Path) -> Tool {
        Tool::new("apply")
            .cwd(self.work.path())
            .backend("cuda")
            .repo(self.via())
            .tag(TAG)
            .digest_map(map)
            .json()
    }

    /// A command of this setup (`verify`, `rollback`) on its map.
    fn on_map(&self, command: &str) -> Run {
        Tool::new(command)
            .cwd(self.work.path())
            .digest_map(self.map_path())
            .run()
    }

    fn now(&self, tag: &str) -> String {
        served(&format!("{}:{tag}", self.reg.repo()))
    }

    fn original(&self, tag: &str) -> &str {
        &self
            .originals
            .iter()
            .find(|(t, _)| t == tag)
            .expect("known tag")
            .1
    }

    /// Every tag that no longer serves its original is named in the map on disk, with that
    /// original and with the digest it serves now as the patched one.
    fn assert_every_move_recorded(&self, case: &str) {
        self.assert_moves_recorded_in(case, &self.map_path());
    }

    fn assert_moves_recorded_in(&self, case: &str, path: &Path) {
        let map: Option<Value> = std::fs::read(path)
            .ok()
            .map(|b| serde_json::from_slice(&b).expect("the map on disk is whole JSON"));
        for (tag, original) in &self.originals {
            let now = self.now(tag);
            if now == *original {
                continue;
            }
            let map = map
                .as_ref()
                .unwrap_or_else(|| panic!("{case}: {tag} moved but no digest map was written"));
            let name = format!("{}:{tag}", self.via());
            let mut entries = Vec::new();
            for img in map["images"].as_array().expect("images") {
                entries.push((
                    img["target"].clone(),
                    img["original_digest"].clone(),
                    img["patched_digest"].clone(),
                ));
                for c in img["companions"].as_array().into_iter().flatten() {
                    entries.push((
                        c["target"].clone(),
                        c["original_digest"].clone(),
                        c["patched_digest"].clone(),
                    ));
                }
            }
            let hit = entries.iter().find(|(t, _, _)| *t == name);
            let (_, o, p) = hit.unwrap_or_else(|| {
                panic!("{case}: {tag} moved to {now} but the map does not name it: {map:#}")
            });
            assert_eq!(o, original, "{case}: {tag}'s original in the map");
            assert_eq!(p, &json!(now), "{case}: {tag}'s patched digest in the map");
        }
    }
}

/// Runs the tool in the background, waits until the proxy holds the request the rule names,
/// then kills it with SIGKILL.
fn kill_at(s: &Setup, signal: &Path) {
    let mut child = s
        .apply()
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn runner-patch");
    wait_for_hold(&mut child, signal);
    child.kill().expect("kill");
    child.wait().expect("wait");
}

/// Waits until the proxy signals that it holds the request (the tool still running).
fn wait_for_hold(child: &mut std::process::Child, signal: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !signal.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("runner-patch ended ({status}) before reaching the held request");
        }
        assert!(Instant::now() < deadline, "the held request never came");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A push step: the request the proxy holds, and whether the registry applies it first.
struct Step {
    name: &'static str,
    method: &'static str,
    path_regex: String,
    nth: u32,
    applied: bool,
}

fn steps() -> Vec<Step> {
    let step = |name, method, path_regex: &str, nth, applied| Step {
        name,
        method,
        path_regex: path_regex.to_owned(),
        nth,
        applied,
    };
    vec![
        step("scan", "GET", "/blobs/sha256:", 2, false),
        step("blob upload", "PUT", "/blobs/uploads/", 1, true),
        step("child manifest", "PUT", "/manifests/sha256:", 1, true),
        step("index", "PUT", "/manifests/sha256:", 3, true),
        step(
            "tag, before the registry has it",
            "PUT",
            &format!("/manifests/{TAG}$"),
            1,
            false,
        ),
        step(
            "tag, after the registry applied it",
            "PUT",
            &format!("/manifests/{TAG}$"),
            1,
            true,
        ),
        step(
            "first companion tag",
            "PUT",
            &format!("/manifests/{TAG}-linux-"),
            1,
            true,
        ),
        step(
            "second companion tag",
            "PUT",
            &format!("/manifests/{TAG}-linux-"),
            2,
            true,
        ),
    ]
}

fn killed_at(step: &Step) {
    let s = Setup::new();
    let signal = s.work.path().join("held");
    s.faults(json!([{
        "match": {"method": step.method, "path_regex": step.path_regex, "nth": [step.nth]},
        "fault": {"kind": "hold", "signal": signal.to_str().expect("utf8"), "after_upstream": step.applied},
    }]));
    kill_at(&s, &signal);
    s.assert_every_move_recorded(step.name);

    // A re-run with the same map completes the work, companions included.
    s.faults(json!([]));
    let again = s.apply().run();
    assert_eq!(again.code, 0, "{}: re-run: {}", step.name, again.stderr);
    let map: Value =
        serde_json::from_slice(&std::fs::read(s.map_path()).expect("map")).expect("json");
    let imgs = map["images"].as_array().expect("images");
    assert_eq!(imgs.len(), 1, "{}: {map:#}", step.name);
    let img = &imgs[0];
    assert_eq!(
        img["original_digest"],
        s.original(TAG),
        "{}: {map:#}",
        step.name
    );
    assert!(img.get("in_progress").is_none(), "{}: {map:#}", step.name);
    let patched = img["patched_digest"].as_str().expect("patched").to_owned();
    assert_eq!(s.now(TAG), patched, "{}", step.name);
    let index: Value =
        serde_json::from_slice(&skopeo_raw(&format!("{}@{patched}", s.reg.repo()))).expect("index");
    for (companion, arch) in [(AMD, "amd64"), (ARM, "arm64")] {
        let child = index["manifests"]
            .as_array()
            .expect("children")
            .iter()
            .find(|m| m["platform"]["architecture"] == arch)
            .expect("child");
        assert_eq!(
            s.now(companion),
            child["digest"].as_str().expect("digest"),
            "{}: {companion} left behind",
            step.name
        );
        let rec = img["companions"]
            .as_array()
            .expect("companions")
            .iter()
            .find(|c| c["target"].as_str().is_some_and(|t| t.ends_with(companion)))
            .expect("companion record");
        assert_eq!(
            rec["original_digest"],
            s.original(companion),
            "{}: {map:#}",
            step.name
        );
    }
    let verify = s.on_map("verify");
    assert_eq!(
        verify.code, 0,
        "{}: verify: {}{}",
        step.name, verify.stdout, verify.stderr
    );

    // And rollback puts every tag back on its original.
    let back = s.on_map("rollback");
    assert_eq!(
        back.code, 0,
        "{}: rollback: {}{}",
        step.name, back.stdout, back.stderr
    );
    for (tag, original) in &s.originals {
        assert_eq!(&s.now(tag), original, "{}: {tag} after rollback", step.name);
    }
}

#[test]
fn killed_while_scanning() {
    killed_at(&steps()[0]);
}

#[test]
fn killed_during_a_blob_upload() {
    killed_at(&steps()[1]);
}

#[test]
fn killed_pushing_a_child_manifest() {
    killed_at(&steps()[2]);
}

#[test]
fn killed_pushing_the_index() {
    killed_at(&steps()[3]);
}

#[test]
fn killed_before_the_tag_write_reached_the_registry() {
    killed_at(&steps()[4]);
}

#[test]
fn killed_after_the_tag_moved() {
    killed_at(&steps()[5]);
}

#[test]
fn killed_after_the_first_companion_moved() {
    killed_at(&steps()[6]);
}

#[test]
fn killed_after_the_second_companion_moved() {
    killed_at(&steps()[7]);
}

/// A companion write the registry refuses: the run fails (exit 2), the map still names the tag
/// that moved, verify names the companion left behind, and a re-run completes it.
#[test]
fn a_failed_companion_write_is_recorded_and_completed_by_a_rerun() {
    let s = Setup::new();
    s.faults(json!([{
        "match": {"method": "PUT", "path_regex": format!("/manifests/{TAG}-linux-arm64$")},
        "fault": {"kind": "status", "code": 400, "body": "{\"errors\":[{\"code\":\"DENIED\",\"message\":\"no\"}]}"},
    }]));
    let run = s.apply().run();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(ARM),
        "the error names the companion: {}",
        run.stderr
    );
    s.assert_every_move_recorded("failed companion");
    assert_eq!(s.now(ARM), s.original(ARM));
    let verify = s.on_map("verify");
    assert_eq!(verify.code, 1, "{}{}", verify.stdout, verify.stderr);
    assert!(
        verify.stdout.contains(ARM),
        "verify names the companion left behind: {}",
        verify.stdout
    );

    // Structure-only verify by reference sees it too, without any map.
    let by_ref = Tool::new("verify")
        .cwd(s.work.path())
        .arg(format!("{}:{TAG}", s.reg.repo()))
        .run();
    assert_eq!(by_ref.code, 1, "{}{}", by_ref.stdout, by_ref.stderr);
    assert!(by_ref.stdout.contains(ARM), "{}", by_ref.stdout);

    s.faults(json!([]));
    let again = s.apply().run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_ne!(s.now(ARM), s.original(ARM));
    let verify = s.on_map("verify");
    assert_eq!(verify.code, 0, "{}{}", verify.stdout, verify.stderr);
}

/// A lost map is not a lost original: the patched image names its original itself, so a
/// re-run with a fresh map records the true per-platform originals (and, for the companions
/// the first run left behind, moves them).
#[test]
fn a_lost_map_is_not_a_lost_original() {
    let s = Setup::new();
    let signal = s.work.path().join("held");
    s.faults(json!([{
        "match": {"method": "PUT", "path_regex": format!("/manifests/{TAG}-linux-"), "nth": [1]},
        "fault": {"kind": "hold", "signal": signal.to_str().expect("utf8"), "after_upstream": false},
    }]));
    kill_at(&s, &signal);
    std::fs::remove_file(s.map_path()).expect("lose the map");
    s.faults(json!([]));
    let again = s.apply().run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    let map: Value =
        serde_json::from_slice(&std::fs::read(s.map_path()).expect("map")).expect("json");
    let img = &map["images"][0];
    assert_eq!(img["outcome"], "already-patched", "{map:#}");
    let original_index: Value = serde_json::from_slice(&skopeo_raw(&format!(
        "{}@{}",
        s.reg.repo(),
        s.original(TAG)
    )))
    .expect("index");
    for p in img["platforms"].as_array().expect("platforms") {
        let arch = p["platform"]
            .as_str()
            .expect("platform")
            .split('/')
            .nth(1)
            .expect("arch")
            .to_owned();
        let want = original_index["manifests"]
            .as_array()
            .expect("children")
            .iter()
            .find(|m| m["platform"]["architecture"] == arch.as_str())
            .expect("original child")["digest"]
            .clone();
        assert_eq!(p["original_digest"], want, "{map:#}");
        assert_ne!(p["original_digest"], p["patched_digest"]);
    }
    for companion in [AMD, ARM] {
        assert_ne!(
            s.now(companion),
            s.original(companion),
            "{companion} completed"
        );
    }
    let back = s.on_map("rollback");
    assert_eq!(back.code, 0, "{}{}", back.stdout, back.stderr);
    for companion in [AMD, ARM] {
        assert_eq!(
            s.now(companion),
            s.original(companion),
            "{companion} restored from the label"
        );
    }
}

/// A bad map path is refused before any registry traffic, and nothing moves.
#[test]
fn an_unwritable_map_is_refused_before_the_registry_is_touched() {
    let s = Setup::new();
    let before = s.reg.storage();
    let dir_map = s.work.path().to_str().expect("utf8").to_owned();
    let missing = s.work.path().join("no/such/folder/map.json");
    let junk = s.work.path().join("junk.json");
    std::fs::write(&junk, "not a map").expect("junk");
    for (path, says) in [
        (dir_map.as_str(), "is a directory"),
        (missing.to_str().expect("utf8"), "does not exist"),
        (junk.to_str().expect("utf8"), "not valid"),
    ] {
        let run = Tool::new("apply")
            .cwd(s.work.path())
            .backend("cuda")
            .repo(s.via())
            .tag(TAG)
            .digest_map(path)
            .run();
        assert_eq!(run.code, 2, "{path}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{path}: {}", run.stderr);
        assert_eq!(
            run.stderr.lines().count(),
            1,
            "one sentence: {}",
            run.stderr
        );
    }
    let log = std::fs::read_to_string(s.work.path().join("proxy.log")).unwrap_or_default();
    assert!(
        log.trim().is_empty(),
        "registry traffic before the map was checked: {log}"
    );
    assert_eq!(s.reg.storage(), before);
    assert_eq!(
        std::fs::read_to_string(&junk).expect("junk"),
        "not a map",
        "a map it cannot read is never overwritten"
    );
}

/// `apply --json | head -c1`: the reader goes away, the tool neither panics nor loses the map.
#[test]
fn a_closed_stdout_costs_neither_the_map_nor_a_panic() {
    let s = Setup::new();
    let mut child = s
        .apply()
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    s.assert_every_move_recorded("closed stdout");
    assert_ne!(s.now(TAG), s.original(TAG));
}

/// The same tag twice is one image; a suffix that makes a tag too long is refused before any
/// traffic.
#[test]
fn duplicate_tags_merge_and_bad_target_tags_are_caught_first() {
    let s = Setup::new();
    let long = "x".repeat(120);
    let run = Tool::new("apply")
        .cwd(s.work.path())
        .backend("cuda")
        .repo(s.via())
        .tag(TAG)
        .args(["--tag-suffix", &long])
        .run();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("at most 128"), "{}", run.stderr);
    let log = std::fs::read_to_string(s.work.path().join("proxy.log")).unwrap_or_default();
    assert!(
        log.trim().is_empty(),
        "registry traffic before the tag was checked: {log}"
    );

    let twice = s.apply().tag(TAG).run();
    assert_eq!(twice.code, 0, "{}", twice.stderr);
    assert_eq!(twice.json()["images"].as_array().expect("images").len(), 1);
}

/// Rollback tries every entry: one it cannot restore is named with its reason, the others are
/// restored, and the exit status says something failed.
#[test]
fn rollback_tries_every_entry_and_names_each_failure() {
    let reg = Registry::start();
    let tags = ["cuda12.9-vllm0.27.1", "cuda13.0-vllm0.30.0"];
    reg.seed(&tags);
    let work = tempfile::tempdir().expect("tmp");
    let originals: Vec<String> = tags
        .iter()
        .map(|t| served(&format!("{}:{t}", reg.repo())))
        .collect();
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tags(tags)
        .json()
        .digest_map("map.json")
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let path = work.path().join("map.json");
    let mut map: Value = serde_json::from_slice(&std::fs::read(&path).expect("map")).expect("json");
    // The first image's original is gone from the registry (as after a garbage collection).
    let gone = format!("sha256:{}", "0".repeat(64));
    let first = map["images"]
        .as_array_mut()
        .expect("images")
        .iter_mut()
        .find(|i| i["source"].as_str().is_some_and(|s| s.ends_with(tags[0])))
        .expect("first tag's record");
    first["original_digest"] = json!(gone);
    std::fs::write(&path, serde_json::to_vec_pretty(&map).expect("json")).expect("write");
    let back = Tool::new("rollback")
        .cwd(work.path())
        .digest_map("map.json")
        .run();
    assert_eq!(back.code, 2, "{}{}", back.stdout, back.stderr);
    assert!(
        back.stdout.contains("failed") && back.stdout.contains(tags[0]),
        "{}",
        back.stdout
    );
    assert!(back.stdout.contains("restored"), "{}", back.stdout);
    assert_eq!(
        served(&format!("{}:{}", reg.repo(), tags[1])),
        originals[1],
        "the later entry was still restored"
    );
}

/// A full disk: the map cannot be written when the first tag is about to move, so no tag moves
/// and the error says so; with space again, a re-run completes.
#[test]
fn a_full_disk_moves_no_tag() {
    let s = Setup::new();
    let disk = s.work.path().join("small-disk");
    let Some(_unmount) = crate::harness::small_tmpfs(&disk, "64k") else {
        eprintln!("SKIPPED a_full_disk_moves_no_tag: cannot mount a small tmpfs here (needs root)");
        return;
    };
    let map = disk.join("map.json");
    let (signal, release) = (s.work.path().join("held"), s.work.path().join("release"));
    // Held at the first blob read (the scan): the map was probed, nothing recorded yet.
    s.faults(json!([{
        "match": {"method": "GET", "path_regex": "/blobs/sha256:", "nth": [1]},
        "fault": {"kind": "hold", "signal": signal.to_str().expect("utf8"), "release": release.to_str().expect("utf8")},
    }]));
    let apply = s.apply_to(&map);
    let mut child = apply
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_hold(&mut child, &signal);
    // Fill the disk to the last byte.
    {
        use std::io::Write;
        let mut f = std::fs::File::create(disk.join("filler")).expect("filler");
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    std::fs::write(&release, "go").expect("release");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot write digest map") && stderr.contains("no tag was moved"),
        "{stderr}"
    );
    for (tag, original) in &s.originals {
        assert_eq!(
            &s.now(tag),
            original,
            "{tag} moved without its original on disk"
        );
    }
    assert!(!map.exists(), "no half-written map");

    std::fs::remove_file(disk.join("filler")).expect("free the disk");
    s.faults(json!([]));
    let again = apply.run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    s.assert_moves_recorded_in("after the disk had space again", &map);
    assert_ne!(s.now(TAG), s.original(TAG));
}

/// No CA certificates at all (a bare container): one clear error and exit 2, never a panic.
#[test]
fn no_ca_certificates_is_one_clear_error() {
    let work = tempfile::tempdir().expect("tmp");
    let run = Tool::new("plan")
        .cwd(work.path())
        .backend("cuda")
        .repo("127.0.0.1:1/gpustack/runner")
        .tag(TAG)
        .env("SSL_CERT_FILE", "/nonexistent")
        .env("SSL_CERT_DIR", "/nonexistent")
        .run();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert!(run.stderr.contains("CA certificates"), "{}", run.stderr);
}
