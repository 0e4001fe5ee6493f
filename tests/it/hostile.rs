//! A hostile registry (`tests/support/hostile_registry.py`, a misbehaving proxy in front of the
//! real one): bodies that never end or run long, trickled and stalled answers, URLs on another
//! host, a hanging credential helper, an index with thousands of children. Each case is its own
//! test; each run must end within its bounds (set small here), with exit 2 and one clear
//! sentence (or succeed where the registry is merely unusual), under 100 MiB of memory, and
//! without a credential reaching any host but the registry.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::harness::*;

const TAG: &str = "cuda12.9-vllm0.27.1";
const USER: &str = "hostile-user";
const PASSWORD: &str = "pw-hostile-8Jk2";
/// The bounds every run here gets (docs/reliability.md, "Bounds"): small, so hostile cases end
/// quickly.
const IDLE: u64 = 2;
const REQUEST: u64 = 3;
const HELPER: u64 = 2;
/// What a run may take beyond the bound under test: process start, the requests before the
/// hostile one, and a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(10);
const RSS_LIMIT_KIB: u64 = 100 * 1024;

/// A registry seeded with one fixture tag, the hostile proxy in front of it, a work dir.
struct Setup {
    reg: Registry,
    hostile: Daemon,
    work: tempfile::TempDir,
    log: PathBuf,
}

fn setup(case: &str, extra: &[&str]) -> Setup {
    let reg = Registry::start();
    reg.seed(&[TAG]);
    let work = tempfile::tempdir().expect("tmp");
    let log = work.path().join("hostile.jsonl");
    let mut args = vec![
        "--upstream",
        reg.addr.as_str(),
        "--case",
        case,
        "--log",
        log.to_str().expect("utf-8 path"),
        "--lifetime",
        "300",
    ];
    args.extend_from_slice(extra);
    let hostile = Daemon::start("hostile_registry", &args);
    Setup {
        reg,
        hostile,
        work,
        log,
    }
}

impl Setup {
    fn repo(&self) -> String {
        format!("{}/{REPO}", self.hostile.addr())
    }

    /// Every request the proxy saw, on both listeners.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("log line"))
            .collect()
    }

    /// A Docker config with the proxy's credentials, as `DOCKER_CONFIG`.
    fn docker_config(&self) -> PathBuf {
        let dir = self.work.path().join("docker");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
        std::fs::write(
            dir.join("config.json"),
            json!({"auths": {self.hostile.addr(): {"auth": auth}}}).to_string(),
        )
        .expect("write");
        dir
    }
}

/// The tool in `cwd` with the bounds every run here gets.
fn tool(cwd: &Path, command: &str) -> Tool {
    Tool::new(command)
        .cwd(cwd)
        .env("RUNNER_PATCH_IDLE_TIMEOUT", IDLE.to_string())
        .env("RUNNER_PATCH_REQUEST_TIMEOUT", REQUEST.to_string())
        .env("RUNNER_PATCH_HELPER_TIMEOUT", HELPER.to_string())
}

/// The error lines of a run; each must be one sentence that never repeats its cause.
fn errors(run: &Run) -> Vec<String> {
    let lines: Vec<String> = run
        .stderr
        .lines()
        .filter(|l| l.contains("error:"))
        .map(str::to_owned)
        .collect();
    for line in &lines {
        // "X: X": no part between ": " separators appears twice (a cause printed by a
        // message and again as its source).
        let parts: Vec<&str> = line.split(": ").filter(|p| p.len() >= 12).collect();
        for (i, p) in parts.iter().enumerate() {
            assert!(!parts[i + 1..].contains(p), "message repeats {p:?}: {line}");
        }
    }
    lines
}

/// A run that must fail: exit 2, within `limit`, under the memory bound, with exactly one error
/// line that contains every one of `says`.
fn assert_fails(b: &Measured, limit: Duration, says: &[&str]) -> String {
    let run = &b.run;
    assert_eq!(
        run.code, 2,
        "exit code\nstdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
    assert!(
        b.took <= limit,
        "took {:?}, over {limit:?}: {}",
        b.took,
        run.stderr
    );
    assert!(
        b.rss_kib < RSS_LIMIT_KIB,
        "max RSS {} KiB, over 100 MiB",
        b.rss_kib
    );
    let errs = errors(run);
    assert_eq!(errs.len(), 1, "one error line expected: {}", run.stderr);
    for s in says {
        assert!(errs[0].contains(s), "error does not say {s:?}: {}", errs[0]);
    }
    errs[0].clone()
}

fn plan(cwd: &Path, repo: &str) -> Tool {
    tool(cwd, "plan").backend("cuda").repo(repo).tag(TAG).json()
}

#[test]
fn an_endless_blob_body_is_cut_at_the_descriptor_size() {
    let s = setup("endless-blob", &[]);
    let repo = s.repo();
    let b = plan(s.work.path(), &repo).measured(SLACK * 3);
    let e = assert_fails(
        &b,
        SLACK,
        &[
            "fetching blob",
            "sha256:",
            "bytes the descriptor gives; stopped reading",
        ],
    );
    assert!(!e.contains("digest mismatch"), "{e}");
}

#[test]
fn an_over_long_blob_is_refused_before_its_extra_bytes() {
    let s = setup("long-blob", &[]);
    let repo = s.repo();
    let b = plan(s.work.path(), &repo).measured(SLACK * 3);
    assert_fails(
        &b,
        SLACK,
        &[
            "fetching blob",
            "announces",
            "more than the",
            "refusing to read them",
        ],
    );
}

#[test]
fn an_over_long_manifest_is_cut_at_4_mib_while_streaming() {
    let s = setup("long-manifest", &[]);
    let repo = s.repo();
    let b = plan(s.work.path(), &repo).measured(SLACK * 3);
    assert_fails(
        &b,
        SLACK,
        &[
            "fetching manifest",
            "over the 4194304 byte limit for manifests",
        ],
    );
}

#[test]
fn a_trickled_manifest_fails_by_its_deadline() {
    // One byte every 0.5 s never trips the idle timeout; the request deadline must end it.
    let s = setup("trickle-manifest", &["--interval", "0.5"]);
    let repo = s.repo();
    let b = plan(s.work.path(), &repo).measured(SLACK * 3);
    assert_fails(
        &b,
        Duration::from_secs(REQUEST) + SLACK,
        &["fetching manifest", "deadline"],
    );
    assert!(
        b.took >= Duration::from_secs(REQUEST),
        "failed before its deadline: {:?}",
        b.took
    );
}

#[test]
fn a_stalled_blob_fails_within_the_idle_timeout() {
    let s = setup("stall-blob", &[]);
    let repo = s.repo();
    let b = plan(s.work.path(), &repo).measured(SLACK * 3);
    assert_fails(
        &b,
        Duration::from_secs(IDLE) + SLACK,
        &[
            "fetching blob",
            "sha256:",
            &format!("no byte arrived for {IDLE} s"),
        ],
    );
}

#[test]
fn a_foreign_layer_that_is_not_there_is_named_as_such() {
    let s = setup("foreign-layer", &[]);
    let repo = s.repo();
    let b = plan(s.work.path(), &repo).measured(SLACK * 3);
    assert_fails(
        &b,
        SLACK,
        &[
            "foreign, non-distributable layer",
            "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
            "https://foreign.example/layer.tar.gz",
        ],
    );
}

/// Asserts that credentials were in use at the registry, that the other host was called, and
/// that no request to it carried an Authorization header.
fn assert_no_credentials_elsewhere(s: &Setup, what: &str) {
    let reqs = s.requests();
    let authed = reqs
        .iter()
        .filter(|r| r["listener"] == "registry" && r["authorization"].is_string())
        .count();
    assert!(authed > 0, "no credentials reached the registry: {reqs:?}");
    let elsewhere: Vec<&Value> = reqs
        .iter()
        .filter(|r| r["listener"] == "elsewhere")
        .collect();
    assert!(
        elsewhere
            .iter()
            .any(|r| r["path"].as_str().is_some_and(|p| p.contains(what))),
        "the other host was never called for {what}: {reqs:?}"
    );
    for r in elsewhere {
        assert!(
            r["authorization"].is_null(),
            "a credential reached another host: {r}"
        );
    }
}

#[test]
fn an_upload_location_on_another_host_gets_no_credentials() {
    let s = setup(
        "location-elsewhere",
        &["--user", USER, "--password", PASSWORD],
    );
    let repo = s.repo();
    let cfg = s.docker_config();
    let b = tool(s.work.path(), "apply")
        .backend("cuda")
        .repo(&repo)
        .tag(TAG)
        .json()
        .env("DOCKER_CONFIG", &cfg)
        .measured(SLACK * 6);
    // The other host is the registry's own storage here: the upload completes there.
    assert_eq!(b.run.code, 0, "{}", b.run.stderr);
    assert!(b.rss_kib < RSS_LIMIT_KIB, "max RSS {} KiB", b.rss_kib);
    assert_eq!(b.run.json()["images"][0]["outcome"], "patched");
    assert_no_credentials_elsewhere(&s, "/blobs/uploads/");
    // skopeo (not this tool) reads the patched tag from the real registry behind the proxy.
    let patched = b.run.json()["images"][0]["patched_digest"]
        .as_str()
        .expect("patched digest")
        .to_owned();
    assert_eq!(served(&format!("{}:{TAG}", s.reg.repo())), patched);
}

#[test]
fn a_tag_list_link_to_another_host_gets_no_credentials() {
    let s = setup("link-elsewhere", &["--user", USER, "--password", PASSWORD]);
    let repo = s.repo();
    let cfg = s.docker_config();
    // Without --tag the repository's tags are listed, following the Link.
    let b = tool(s.work.path(), "plan")
        .backend("cuda")
        .repo(&repo)
        .json()
        .env("DOCKER_CONFIG", &cfg)
        .measured(SLACK * 3);
    assert_eq!(b.run.code, 0, "{}", b.run.stderr);
    assert!(b.rss_kib < RSS_LIMIT_KIB, "max RSS {} KiB", b.rss_kib);
    assert_eq!(b.run.json()["images"][0]["source"], format!("{repo}:{TAG}"));
    assert_no_credentials_elsewhere(&s, "/tags/list");
}

#[test]
fn a_hanging_credential_helper_is_stopped_after_its_timeout() {
    let s = setup("none", &["--user", USER, "--password", PASSWORD]);
    let repo = s.repo();
    let bin = s.work.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let helper = bin.join("docker-credential-hang");
    std::fs::write(&helper, "#!/bin/sh\nexec sleep 600\n").expect("write helper");
    let mut perms = std::fs::metadata(&helper).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&helper, perms).expect("chmod");
    let cfg = s.work.path().join("docker");
    std::fs::create_dir_all(&cfg).expect("mkdir");
    std::fs::write(cfg.join("config.json"), r#"{"credsStore": "hang"}"#).expect("write");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let b = plan(s.work.path(), &repo)
        .env("DOCKER_CONFIG", &cfg)
        .env("PATH", path)
        .measured(SLACK * 3);
    assert_fails(
        &b,
        Duration::from_secs(HELPER) + SLACK,
        &[
            "docker-credential-hang",
            &format!("did not answer within {HELPER} s"),
        ],
    );
}

#[test]
fn an_index_with_thousands_of_children_keeps_connections_bounded() {
    let s = setup("children", &["--children", "1000", "--delay", "0.02"]);
    let repo = s.repo();
    let jobs: u64 = 2;
    // Its time is bounded loosely: 1,000 platforms through a Python proxy, --jobs 2 at a time.
    let b = plan(s.work.path(), &repo)
        .args(["--jobs", "2"])
        .measured(SLACK * 30);
    assert!(b.rss_kib < RSS_LIMIT_KIB, "max RSS {} KiB", b.rss_kib);
    assert_ne!(b.run.code, 2, "{}", b.run.stderr);
    let stats = stats(&s.hostile.addr());
    let children = s
        .requests()
        .iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.contains("/manifests/sha256:"))
        })
        .count();
    assert!(children >= 1000, "only {children} child fetches: {stats}");
    let max = stats["max_connections"].as_u64().expect("max_connections");
    // At most 4 requests per job are in flight; a connection still being handed back to the
    // pool when the next request starts can briefly add one more.
    assert!(
        max <= 4 * jobs + 2,
        "{max} connections at once for --jobs {jobs}: {stats}"
    );
    let platforms = b.run.json()["images"][0]["platforms"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(platforms, 1000, "{}", b.run.stderr);
}

#[test]
fn an_index_with_too_many_children_is_refused_before_fetching_them() {
    let s = setup("children", &["--children", "5000"]);
    let repo = s.repo();
    let b = plan(s.work.path(), &repo).measured(SLACK * 3);
    assert!(b.rss_kib < RSS_LIMIT_KIB, "max RSS {} KiB", b.rss_kib);
    assert_eq!(b.run.code, 2, "{}", b.run.stderr);
    assert!(
        b.run.stderr.contains("lists 5000 manifests") && b.run.stderr.contains("1024"),
        "{}",
        b.run.stderr
    );
    let fetched = s
        .requests()
        .iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.contains("/manifests/sha256:"))
        })
        .count();
    assert_eq!(fetched, 0, "no child is fetched from such an index");
}

/// The hostile registry's connection counts.
fn stats(addr: &str) -> Value {
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    std::io::Write::write_all(
        &mut c,
        format!("GET /_hostile/stats HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes(),
    )
    .expect("write");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut c, &mut text).expect("read");
    serde_json::from_str(text.split("\r\n\r\n").nth(1).expect("body")).expect("stats json")
}

#[test]
fn the_client_keeps_its_requests_in_flight_within_its_limit() {
    // The client's own bound, without the platform-scan bound of `plan` in front of it: 200
    // concurrent manifest fetches through a client limited to 3, each answer held 0.05 s.
    let s = setup("children", &["--delay", "0.05"]);
    let index: Value = serde_json::from_slice(&skopeo_raw(&format!("{}:{TAG}", s.reg.repo())))
        .expect("index json");
    let child = index["manifests"][0]["digest"]
        .as_str()
        .expect("child digest")
        .to_owned();
    let repo = runner_patch::registry::Repo::parse(&s.repo()).expect("repo");
    let reg = runner_patch::registry::Registry::with_concurrency(&[&repo], 3).expect("client");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let fetched = rt.block_on(async {
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let (reg, r) = (reg.clone(), repo.at_digest(&child));
                tokio::spawn(async move { reg.manifest_get(&r).await.map(|d| d.digest) })
            })
            .collect();
        let mut ok = 0;
        for t in tasks {
            assert_eq!(t.await.expect("task").expect("manifest"), child);
            ok += 1;
        }
        ok
    });
    assert_eq!(fetched, 200);
    let st = stats(&s.hostile.addr());
    let max = st["max_connections"].as_u64().expect("max_connections");
    // 3 in flight; a connection still being handed back to the pool when the next request
    // starts may briefly add one or more on a loaded machine: the bound is what matters
    // (200 fetches were started at once).
    assert!(
        (2..=6).contains(&max),
        "{max} connections at once for a limit of 3: {st}"
    );
}

#[test]
fn an_invalid_registry_host_is_refused_before_any_traffic() {
    let work = tempfile::tempdir().expect("tmp");
    for (repo, says) in [
        (
            "127.0.0.1:99999/gpustack/runner",
            "not a number from 1 to 65535",
        ),
        ("[zz::q]:5000/gpustack/runner", "not an IPv6 address"),
    ] {
        let b = plan(work.path(), repo).measured(SLACK);
        assert_fails(&b, SLACK, &["registry host", says]);
        let target = tool(work.path(), "apply")
            .backend("cuda")
            .repo("127.0.0.1:1/gpustack/runner")
            .target_repo(repo)
            .tag(TAG)
            .measured(SLACK);
        // Port 1 is never contacted: the target is checked first.
        let e = assert_fails(&target, SLACK, &["--target-repository", says]);
        assert!(!e.contains("connect"), "{e}");
    }
}
