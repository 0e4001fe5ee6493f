//! Real-registry conditions: htpasswd and token auth with credentials from a Docker config,
//! mounts with one token for both repositories, a fault-injecting proxy, concurrent runs, and
//! secrets kept out of the most verbose logs.

use std::path::Path;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::harness::*;

const TAG: &str = "cuda12.9-vllm0.27.1";
const USER: &str = "ci-bot";
const PASSWORD: &str = "pw-Zq8vT3xK";

fn docker_config(dir: &Path, registry: &str) -> std::path::PathBuf {
    let cfg = dir.join("docker");
    std::fs::create_dir_all(&cfg).expect("mkdir");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::write(
        cfg.join("config.json"),
        json!({"auths": {registry: {"auth": auth}}}).to_string(),
    )
    .expect("write");
    cfg
}

fn patched_digest(map: &Value) -> String {
    map["images"][0]["patched_digest"]
        .as_str()
        .unwrap_or_else(|| panic!("no patched digest in {map}"))
        .to_owned()
}

/// `apply --json` of the tag from `repository`, in `cwd`.
fn apply(cwd: &Path, repository: &str) -> Tool {
    Tool::new("apply")
        .cwd(cwd)
        .backend("cuda")
        .repo(repository)
        .tag(TAG)
        .json()
}

/// The digest a clean run gives (the fixture and the patch are reproducible).
/// What `plan` (which pushes nothing) says the patched digest will be, reading the source by
/// this exact name: the OCI child's `base.name` annotation names it, so another registry
/// address gives another digest. `args` are apply's arguments after the subcommand.
fn planned_digest(cwd: &Path, args: &[&str]) -> String {
    let run = Tool::new("plan").cwd(cwd).args(args).run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    patched_digest(&run.json())
}

#[test]
fn htpasswd_auth_with_credentials_from_docker_config() {
    let mut reg = Registry::start();
    reg.seed(&[TAG]);
    let ht = reg.dir.path().join("htpasswd");
    let out = python("tests.support.registry_auth")
        .args([
            "htpasswd",
            "--dir",
            &reg.dir.path().display().to_string(),
            "--user",
            USER,
            "--password",
            PASSWORD,
        ])
        .output()
        .expect("registry_auth.py");
    assert!(
        out.status.success() && ht.exists(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    reg.restart(Some(&format!(
        "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
        ht.display()
    )));
    let work = tempfile::tempdir().expect("tmp");
    let repo = reg.repo();

    let anon = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(&repo)
        .tag(TAG)
        .run();
    assert_eq!(anon.code, 2, "{}", anon.stderr);
    assert!(
        anon.stderr.contains("no credentials found"),
        "{}",
        anon.stderr
    );

    let cfg = docker_config(work.path(), &reg.addr);
    let run = apply(work.path(), &repo)
        .arg("-vv")
        .env("DOCKER_CONFIG", &cfg)
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["images"][0]["outcome"], "patched");
    assert!(!run.stderr.contains(PASSWORD), "password printed");
    let v = Tool::new("verify")
        .cwd(work.path())
        .digest_map("runner-patch-manifest.json")
        .env("DOCKER_CONFIG", &cfg)
        .run();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);

    // The same credentials through a credential helper (credHelpers), as Docker runs them.
    let bin = work.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let helper = bin.join("docker-credential-rptest");
    std::fs::write(&helper, format!("#!/bin/sh\nread server\nprintf '{{\"ServerURL\":\"%s\",\"Username\":\"{USER}\",\"Secret\":\"{PASSWORD}\"}}' \"$server\"\n")).expect("helper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let hcfg = work.path().join("helper-config");
    std::fs::create_dir_all(&hcfg).expect("mkdir");
    std::fs::write(
        hcfg.join("config.json"),
        json!({"credHelpers": {reg.addr.as_str(): "rptest"}}).to_string(),
    )
    .expect("write");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let again = apply(work.path(), &repo)
        .arg("-vv")
        .digest_map("again.json")
        .env("DOCKER_CONFIG", &hcfg)
        .env("PATH", path)
        .run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.json()["images"][0]["outcome"], "already-patched");
    assert!(!again.stderr.contains(PASSWORD), "password printed");
}

#[test]
fn a_mirror_on_another_registry_gets_every_blob_streamed() {
    let src = Registry::start();
    let fixture = src.seed(&[TAG]);
    let dst = Registry::start();
    let work = tempfile::tempdir().expect("tmp");
    let target = dst.repo();
    let run = apply(work.path(), &src.repo()).target_repo(&target).run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let map = run.json();
    assert_eq!(
        served(&format!("{}:{TAG}", src.repo())),
        fixture["images"][TAG]["digest"].as_str().expect("d"),
        "source moved"
    );
    assert_eq!(served(&format!("{target}:{TAG}")), patched_digest(&map));
    // Everything is on the mirror: skopeo + umoci pull and unpack each platform from it.
    for arch in ["amd64", "arm64"] {
        let (rootfs, _) = unpack(&format!("{target}:{TAG}"), arch, &work.path().join(arch));
        let f = map["images"][0]["platforms"][0]["file"]
            .as_str()
            .expect("file")
            .trim_start_matches('/');
        assert!(std::fs::read_to_string(rootfs.join(f))
            .expect("file")
            .contains("runner-patch multiconnector-observe"));
    }
    let on_map = |command: &str| {
        Tool::new(command)
            .cwd(work.path())
            .digest_map("runner-patch-manifest.json")
            .run()
    };
    let v = on_map("verify");
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
    // Rollback onto the mirror copies the original there and points the tag at it.
    let rb = on_map("rollback");
    assert_eq!(rb.code, 0, "{}", rb.stderr);
    assert_eq!(
        served(&format!("{target}:{TAG}")),
        fixture["images"][TAG]["digest"].as_str().expect("d")
    );
}

#[test]
fn token_auth_mounts_with_one_token_and_never_prints_secrets() {
    let mut reg = Registry::start();
    reg.seed(&[TAG]);
    let tdir = reg.dir.path().join("token");
    let ts = Daemon::start(
        "token_server",
        &[
            "--dir",
            tdir.to_str().expect("utf8"),
            "--service",
            "test-registry",
            "--issuer",
            "test-issuer",
            "--user",
            USER,
            "--password",
            PASSWORD,
            "--ttl",
            "300",
        ],
    );
    let auth = format!(
        "auth:\n  token:\n    realm: {}\n    service: test-registry\n    issuer: test-issuer\n    rootcertbundle: {}\n",
        ts.ready["realm"].as_str().expect("realm"),
        ts.ready["rootcert"].as_str().expect("rootcert")
    );
    reg.restart(Some(&auth));
    let work = tempfile::tempdir().expect("tmp");
    let cfg = docker_config(work.path(), &reg.addr);
    let target = format!("{}/mirror/runner", reg.addr);
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tag(TAG)
        .target_repo(&target)
        .arg("-vv")
        .env("DOCKER_CONFIG", &cfg)
        .env("RUNNER_PATCH_LOG", "trace")
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Secrets stay out of the most verbose output: no password, no JWT.
    for out in [&run.stdout, &run.stderr] {
        assert!(!out.contains(PASSWORD), "password printed");
        assert!(!out.contains("eyJ"), "a token was printed");
    }
    // Layers were mounted with one token holding push on the target and pull on the source.
    let log = std::fs::read_to_string(ts.ready["log"].as_str().expect("log")).expect("token log");
    let mount_token = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| {
            let access = e["access"].as_array().cloned().unwrap_or_default();
            let has = |name: &str, action: &str| {
                access.iter().any(|a| {
                    a["name"] == name
                        && a["actions"]
                            .as_array()
                            .is_some_and(|x| x.iter().any(|y| y == action))
                })
            };
            has("mirror/runner", "push") && has("gpustack/runner", "pull")
        });
    assert!(
        mount_token.is_some(),
        "no token held push on the target and pull on the source:\n{log}"
    );
    let v = Tool::new("verify")
        .cwd(work.path())
        .digest_map("runner-patch-manifest.json")
        .env("DOCKER_CONFIG", &cfg)
        .run();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
}

/// One fault case: the run's expected result, then a clean re-run through the same proxy.
struct Case {
    name: &'static str,
    plan: Value,
    /// `None`: the faulty run succeeds (after retries); `Some(text)`: it fails naming `text`.
    fails_with: Option<&'static str>,
}

#[test]
fn faults_end_in_success_or_a_clear_failure_and_a_rerun_completes() {
    let cases = vec![
        Case {
            name: "reset mid-download",
            plan: json!([{"match": {"method": "GET", "path_regex": "/blobs/sha256:", "nth": [3]}, "fault": {"kind": "reset_after_bytes", "bytes": 2000}}]),
            fails_with: None,
        },
        Case {
            name: "reset mid-upload",
            plan: json!([{"match": {"method": "PUT", "path_regex": "/blobs/uploads/.*digest=", "nth": [1]}, "fault": {"kind": "reset_request_after_bytes", "bytes": 100}}]),
            fails_with: None,
        },
        Case {
            name: "burst of 503",
            plan: json!([{"match": {"path_regex": "/manifests/", "nth": [1, 2, 3]}, "fault": {"kind": "status", "code": 503}}]),
            fails_with: None,
        },
        Case {
            name: "429 with Retry-After",
            plan: json!([{"match": {"path_regex": "/blobs/", "nth": [1]}, "fault": {"kind": "status", "code": 429, "headers": {"Retry-After": "1"}}}]),
            fails_with: None,
        },
        Case {
            name: "truncated body",
            plan: json!([{"match": {"method": "GET", "path_regex": "/blobs/sha256:", "nth": [2]}, "fault": {"kind": "truncate", "bytes": 1500}}]),
            fails_with: None,
        },
        Case {
            name: "one byte changed",
            plan: json!([{"match": {"method": "GET", "path_regex": "/blobs/sha256:", "nth": [2]}, "fault": {"kind": "flip_byte", "offset": 300}}]),
            fails_with: Some("digest mismatch"),
        },
        Case {
            name: "HTML instead of JSON",
            plan: json!([{"match": {"method": "GET", "path_regex": "/manifests/"}, "fault": {"kind": "html", "code": 200}}]),
            fails_with: Some("text/html"),
        },
        Case {
            name: "no Docker-Content-Digest",
            plan: json!([{"match": {"method": "GET", "path_regex": "/manifests/"}, "fault": {"kind": "drop_header", "name": "Docker-Content-Digest"}}]),
            fails_with: Some("Docker-Content-Digest"),
        },
        Case {
            name: "wrong Content-Type",
            plan: json!([{"match": {"method": "GET", "path_regex": "/manifests/"}, "fault": {"kind": "content_type", "value": "text/plain"}}]),
            fails_with: Some("text/plain"),
        },
        Case {
            name: "monolithic upload refused",
            plan: json!([{"match": {"method": "PUT", "path_regex": "/blobs/uploads/.*digest=", "nth": [1]}, "fault": {"kind": "status", "code": 400}}]),
            fails_with: None,
        },
        Case {
            name: "mount refused",
            plan: json!([{"match": {"method": "POST", "path_regex": "mount="}, "fault": {"kind": "status", "code": 401}}]),
            fails_with: None,
        },
    ];
    for case in cases {
        let reg = Registry::start();
        let fixture = reg.seed(&[TAG]);
        let original = fixture["images"][TAG]["digest"]
            .as_str()
            .expect("digest")
            .to_owned();
        let work = tempfile::tempdir().expect("tmp");
        let plan_path = work.path().join("plan.json");
        std::fs::write(&plan_path, "[]").expect("plan");
        let proxy = Daemon::start(
            "fault_proxy",
            &[
                "--upstream",
                &reg.addr,
                "--plan",
                plan_path.to_str().expect("utf8"),
                "--log",
                work.path().join("proxy.log").to_str().expect("utf8"),
            ],
        );
        let via = format!("{}/gpustack/runner", proxy.addr());
        // The mount case needs a second repository; all others patch in place.
        let extra: Vec<&str> = if case.name == "mount refused" {
            vec!["--target-repository", "PLACEHOLDER"]
        } else {
            vec![]
        };
        let target = format!("{}/mirror/runner", proxy.addr());
        let mut args = vec![
            "--backend",
            "cuda",
            "--repository",
            via.as_str(),
            "--tag",
            TAG,
            "--json",
        ];
        for a in &extra {
            args.push(if *a == "PLACEHOLDER" {
                target.as_str()
            } else {
                a
            });
        }
        let apply = Tool::new("apply").cwd(work.path()).args(&args);
        // Without faults first (the proxy's counters start afresh when its plan changes).
        let expected = planned_digest(work.path(), &args);
        std::fs::write(&plan_path, case.plan.to_string()).expect("plan");
        let run = apply.run();
        let served_now = served(&format!("{}:{TAG}", reg.repo()));
        match case.fails_with {
            None => {
                assert_eq!(run.code, 0, "{}: {}", case.name, run.stderr);
                assert_eq!(
                    patched_digest(&run.json()),
                    expected,
                    "{}: different digests after retries",
                    case.name
                );
                if extra.is_empty() {
                    assert_eq!(served_now, expected, "{}", case.name);
                } else {
                    assert_eq!(served_now, original, "{}: the source moved", case.name);
                    assert_eq!(
                        served(&format!("{}/mirror/runner:{TAG}", reg.addr)),
                        expected,
                        "{}",
                        case.name
                    );
                }
            }
            Some(text) => {
                assert_eq!(run.code, 2, "{}: {}", case.name, run.stderr);
                assert!(
                    run.stderr.contains(text),
                    "{}: stderr lacks {text:?}: {}",
                    case.name,
                    run.stderr
                );
                assert_eq!(
                    served_now, original,
                    "{}: the source tag moved after a failure",
                    case.name
                );
                assert!(
                    !work.path().join("runner-patch-manifest.json").exists(),
                    "{}: a map lists unpushed work",
                    case.name
                );
            }
        }
        // A clean re-run through the same proxy finishes the work with the same digests.
        std::fs::write(&plan_path, "[]").expect("plan");
        let again = apply.run();
        assert_eq!(again.code, 0, "{} (re-run): {}", case.name, again.stderr);
        let map = again.json();
        let outcome = map["images"][0]["outcome"]
            .as_str()
            .expect("outcome")
            .to_owned();
        if extra.is_empty() {
            assert_eq!(
                served(&format!("{}:{TAG}", reg.repo())),
                expected,
                "{} (re-run)",
                case.name
            );
            assert!(
                outcome == "patched" || outcome == "already-patched",
                "{}: {outcome}",
                case.name
            );
        } else {
            assert_eq!(patched_digest(&map), expected);
        }
    }
}

#[test]
fn two_concurrent_runs_end_with_one_patched_image() {
    let reg = Registry::start();
    reg.seed(&[TAG]);
    let repo = reg.repo();
    let expected = {
        let w = tempfile::tempdir().expect("tmp");
        planned_digest(
            w.path(),
            &[
                "--backend",
                "cuda",
                "--repository",
                &repo,
                "--tag",
                TAG,
                "--json",
            ],
        )
    };
    let (a, b) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    let (ra, rb) = std::thread::scope(|s| {
        let ha = s.spawn(|| apply(a.path(), &repo).run());
        let hb = s.spawn(|| apply(b.path(), &repo).run());
        (ha.join().expect("a"), hb.join().expect("b"))
    });
    for r in [&ra, &rb] {
        assert_eq!(r.code, 0, "{}", r.stderr);
        let map = r.json();
        let outcome = map["images"][0]["outcome"].as_str().expect("outcome");
        assert!(
            outcome == "patched" || outcome == "already-patched",
            "{outcome}"
        );
        assert_eq!(patched_digest(&map), expected);
    }
    assert_eq!(served(&format!("{repo}:{TAG}")), expected);
    let v = Tool::new("verify")
        .cwd(a.path())
        .arg(format!("{repo}:{TAG}"))
        .run();
    assert_eq!(v.code, 0, "{}", v.stdout);
}
