//! The release-pipeline step: the example GitHub Actions workflow (plan, approval, a matrix of
//! apply shards, the join of their maps) run step by step against a local registry with
//! credentials from secrets, the job summaries checked against the digest maps, the joined map
//! against one unsharded run's, and `::warning::` lines only inside GitHub Actions.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::harness::*;

const USER: &str = "release-bot";
const PASSWORD: &str = "tok-Hq7Wc2pL9x";
const DEMO_CUDA: &[&str] = &[
    "cuda12.9-vllm0.27.1",
    "cuda13.0-vllm0.30.0",
    "cuda13.0-vllm0.33.0",
];

/// Serves the files of `dir` over plain HTTP on loopback (GET only), as a release page would.
pub(crate) fn serve_dir(dir: PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
                    break;
                }
            }
            let name = line.split_whitespace().nth(1).unwrap_or("/");
            let file = dir.join(name.trim_start_matches('/'));
            let mut stream = reader.into_inner();
            match std::fs::read(&file) {
                Ok(body) if !name.contains("..") => {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(&body);
                }
                _ => {
                    let _ = stream.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                }
            }
        }
    });
    addr
}

/// A registry that wants a password (htpasswd), seeded with the demo's CUDA images.
fn registry_with_password() -> (Registry, Value) {
    let mut reg = Registry::start();
    let seeded = reg.seed(DEMO_CUDA);
    want_password(&mut reg);
    (reg, seeded)
}

/// Restarts the registry with htpasswd auth (the test's user and password).
fn want_password(reg: &mut Registry) {
    let out = python("tests.support.registry_auth")
        .args(["htpasswd", "--dir"])
        .arg(reg.dir.path())
        .args(["--user", USER, "--password", PASSWORD])
        .output()
        .expect("registry_auth.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ht = reg.dir.path().join("htpasswd");
    reg.restart(Some(&format!(
        "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
        ht.display()
    )));
}

/// The registry as it was just after seeding, at the same address (so the images, whose
/// annotations name their source, are the same): storage emptied, seeded again, password on.
fn reseed(reg: &mut Registry) -> Value {
    std::fs::remove_dir_all(reg.dir.path().join("storage")).expect("empty the storage");
    reg.restart(None);
    let seeded = reg.seed(DEMO_CUDA);
    want_password(reg);
    seeded
}

/// A Docker config in `dir` with the test's credentials for `reg`.
fn docker_config(dir: &Path, reg: &Registry) -> PathBuf {
    use base64::Engine as _;
    let cfg = dir.join("docker");
    std::fs::create_dir_all(&cfg).expect("mkdir");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::write(
        cfg.join("config.json"),
        serde_json::json!({"auths": {reg.addr.as_str(): {"auth": auth}}}).to_string(),
    )
    .expect("config");
    cfg
}

/// The records of a digest map by target.
fn records(map: &Value) -> std::collections::BTreeMap<String, Value> {
    map["images"]
        .as_array()
        .expect("images")
        .iter()
        .map(|i| (i["target"].as_str().expect("target").to_owned(), i.clone()))
        .collect()
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).expect("json")
}

/// The workflow as the runner project would copy it, run by `tests/support/run_workflow.py`.
fn run_example(reg: &Registry, work: &Path, secrets: &[(&str, &str)]) -> (i32, String, Value) {
    // The release page: the binary and its sha256 file, named as `make dist` names them.
    let dl = work.join("release");
    std::fs::create_dir_all(&dl).expect("mkdir");
    let bin = std::fs::read(env!("CARGO_BIN_EXE_runner-patch")).expect("binary");
    std::fs::write(dl.join("runner-patch-linux-amd64"), &bin).expect("write");
    std::fs::write(
        dl.join("runner-patch-linux-amd64.sha256"),
        format!(
            "{}  runner-patch-linux-amd64\n",
            sha256_hex(&bin).trim_start_matches("sha256:")
        ),
    )
    .expect("write");
    let http = serve_dir(dl);
    let mut cmd = python("tests.support.run_workflow");
    cmd.arg(root().join("examples/github-actions/patch-runner.yml"))
        .arg("--work")
        .arg(work.join("wf"))
        .args(["--input", "backend=cuda"])
        .arg("--input")
        .arg(format!("repository={}", reg.repo()))
        .arg("--var")
        .arg(format!(
            "RUNNER_PATCH_URL=http://{http}/runner-patch-linux-amd64"
        ))
        .arg("--watch")
        .arg(reg.dir.path().join("registry.log"));
    for (k, v) in secrets {
        cmd.arg("--secret").arg(format!("{k}={v}"));
    }
    cmd.env_remove("DOCKER_CONFIG")
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("RUNNER_PATCH_USERNAME")
        .env_remove("RUNNER_PATCH_PASSWORD");
    run_workflow(&mut cmd, &work.join("wf"))
}

/// Runs a prepared `run_workflow.py` command whose `--work` is `wf`: its exit status, its log
/// and the report it wrote.
pub(crate) fn run_workflow(cmd: &mut Command, wf: &Path) -> (i32, String, Value) {
    let out = cmd.stdin(Stdio::null()).output().expect("run_workflow.py");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = std::fs::read(wf.join("report.json"))
        .map(|b| serde_json::from_slice(&b).expect("report json"))
        .unwrap_or_else(|_| panic!("no report from run_workflow.py: {log}"));
    (out.status.code().unwrap_or(-1), log, report)
}

/// The report's job `id` (the first run of a matrix job).
pub(crate) fn job<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["jobs"]
        .as_array()
        .and_then(|j| j.iter().find(|j| j["id"] == id))
        .unwrap_or_else(|| panic!("no job {id} in {report}"))
}

/// The data rows of the Markdown tables in `md` whose first cell names an image, as cells.
fn table_rows(md: &str) -> Vec<Vec<String>> {
    md.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            l.trim_matches('|')
                .replace("\\|", "\u{1}")
                .split('|')
                .map(|c| c.trim().replace('\u{1}', "|").trim_matches('`').to_owned())
                .collect()
        })
        .collect()
}

/// What the summary shows for a digest pair, as `summary.rs` writes it.
fn digest_cell(original: &Value, patched: &Value) -> String {
    let o = original.as_str().expect("original");
    match patched.as_str() {
        Some(p) if p != o => format!("{o}` → `{p}"),
        Some(_) => format!("{o}` (unchanged)"),
        None => format!("{o}` → none"),
    }
}

/// Checks every image and platform row of a plan/apply summary against the digest map.
fn assert_summary_matches(md: &str, map: &Value) {
    let rows = table_rows(md);
    let images = map["images"].as_array().expect("images");
    let mut expected_rows = 0;
    for img in images {
        let source = img["source"].as_str().expect("source");
        let all = rows
            .iter()
            .find(|r| r[0] == source && r[1] == "all")
            .unwrap_or_else(|| panic!("no row for {source} in\n{md}"));
        assert_eq!(all[2], img["outcome"].as_str().expect("outcome"), "{md}");
        assert_eq!(
            all[3],
            digest_cell(&img["original_digest"], &img["patched_digest"]),
            "{md}"
        );
        assert_eq!(
            all[7],
            runner_patch::units::human(img["bytes_to_push"].as_u64().expect("bytes")),
            "{md}"
        );
        expected_rows += 1;
        for p in img["platforms"].as_array().expect("platforms") {
            let platform = p["platform"].as_str().expect("platform");
            let row = rows
                .iter()
                .find(|r| r[0] == source && r[1] == platform)
                .unwrap_or_else(|| panic!("no row for {source} {platform} in\n{md}"));
            assert_eq!(row[2], p["outcome"].as_str().expect("outcome"));
            assert_eq!(
                row[3],
                digest_cell(&p["original_digest"], &p["patched_digest"])
            );
            assert_eq!(row[4], p["file"].as_str().unwrap_or(""));
            assert_eq!(row[5], p["vllm_version"].as_str().unwrap_or("?"));
            assert_eq!(
                row[6],
                runner_patch::units::human(p["bytes_scanned"].as_u64().expect("read"))
            );
            assert_eq!(
                row[7],
                runner_patch::units::human(p["bytes_to_push"].as_u64().expect("push"))
            );
            expected_rows += 1;
        }
    }
    assert_eq!(rows.len(), expected_rows, "rows beyond the map in\n{md}");
}

#[test]
fn example_workflow_runs_plan_gate_sharded_apply_join_verify_against_a_registry() {
    let (mut reg, seeded) = registry_with_password();
    let work = tempfile::tempdir().expect("tmp");

    // One unsharded run of the tags the plan will choose, for the joined map to equal; then
    // the registry as it was before it.
    let planned_tags = ["cuda12.9-vllm0.27.1", "cuda13.0-vllm0.30.0"];
    let cfg = docker_config(work.path(), &reg);
    let one = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tags(planned_tags)
        .digest_map("one.json")
        .env("DOCKER_CONFIG", &cfg)
        .run();
    assert_eq!(one.code, 0, "{}", one.stderr);
    let unsharded = read_json(&work.path().join("one.json"));
    assert_eq!(reseed(&mut reg), seeded);

    let (code, log, report) = run_example(
        &reg,
        work.path(),
        &[("REGISTRY_USERNAME", USER), ("REGISTRY_TOKEN", PASSWORD)],
    );
    assert_eq!(code, 0, "{log}\n{report:#}");
    assert!(!log.contains(PASSWORD), "the token appeared in a log");

    // Every step of every job ran, in order, and succeeded: the plan, two apply shards (each
    // at the approval gate), the join.
    let plan = job(&report, "plan");
    let shards: Vec<&Value> = report["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter(|j| j["id"] == "apply")
        .collect();
    assert_eq!(shards.len(), 2, "{report:#}");
    for (k, j) in shards.iter().enumerate() {
        assert_eq!(j["environment"], "runner-release");
        assert_eq!(j["matrix"]["backend"], "cuda");
        assert_eq!(j["matrix"]["shard"], k + 1);
        assert_eq!(j["matrix"]["shards"], 2);
    }
    let join = job(&report, "join");
    for j in shards.iter().copied().chain([plan, join]) {
        let steps = j["steps"].as_array().expect("steps");
        assert!(steps.len() >= 4, "{j:#}");
        for s in steps {
            assert_eq!(s["outcome"], "success", "{j:#}\n{log}");
        }
    }

    // One read of the layers: plan read them, each shard (another machine, the scans carried
    // over by actions/cache) read none. Verify reads on its own, as it must.
    let layers = fixture_layers(&seeded);
    let gets_of = |j: &Value, step: &str| {
        let s = j["steps"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|s| s["name"].as_str().is_some_and(|n| n.starts_with(step)))
            })
            .unwrap_or_else(|| panic!("no step {step} in {j:#}"));
        let w = &s["watch"][0];
        let (from, to) = (
            w[0].as_u64().expect("from") as usize,
            w[1].as_u64().expect("to") as usize,
        );
        layer_gets_in(&reg.log()[from..to], &layers)
    };
    assert!(!gets_of(plan, "Plan").is_empty(), "plan read no layer");
    for j in &shards {
        assert_eq!(
            gets_of(j, "Apply"),
            Vec::<String>::new(),
            "a shard read layers again"
        );
    }

    // The plan went to the job summary and to an artifact; it names exactly the tags the
    // shards took between them.
    let wf = work.path().join("wf");
    let plan_json = read_json(&wf.join("artifacts/runner-patch-plan/plan-cuda.json"));
    let plan_md = std::fs::read_to_string(wf.join("summary-plan.md")).expect("plan summary");
    assert!(
        plan_md.contains("### runner-patch plan: 2 images (2 patched)"),
        "{plan_md}"
    );
    assert_summary_matches(&plan_md, &plan_json);
    let mut planned: Vec<&str> = plan_json["images"]
        .as_array()
        .expect("images")
        .iter()
        .filter(|i| i["outcome"] == "patched")
        .filter_map(|i| i["source"].as_str()?.rsplit(':').next())
        .collect();
    planned.sort();
    assert_eq!(planned, planned_tags);
    assert_eq!(plan["outputs"]["tags"], planned.join(" "));

    // Each shard applied its share (one tag each here), verified it, and kept its own map.
    let mut applied = Vec::new();
    for k in 1..=2 {
        let map = read_json(&wf.join(format!(
            "artifacts/runner-patch-map-cuda-{k}/map-cuda-{k}.json"
        )));
        let images = map["images"].as_array().expect("images");
        assert_eq!(images.len(), 1, "shard {k}: {map:#}");
        applied.push(images[0]["target"].as_str().expect("target").to_owned());
        let md =
            std::fs::read_to_string(wf.join(format!("summary-apply-{k}.md"))).expect("summary");
        let (apply_part, verify_part) = md
            .split_once("### runner-patch verify")
            .unwrap_or_else(|| panic!("no verify summary in\n{md}"));
        assert_summary_matches(apply_part, &map);
        assert!(
            verify_part.starts_with(": every image checks out"),
            "{verify_part}"
        );
    }
    applied.sort();
    assert_eq!(applied, planned_tags.map(|t| format!("{}:{t}", reg.repo())));

    // The joined map: record for record the unsharded run's; the tags serve what it says
    // (skopeo, with the same credentials); verify passed on it in the join job.
    let joined = read_json(&wf.join("artifacts/runner-patch-map/runner-patch-map.json"));
    assert_eq!(records(&joined), records(&unsharded));
    for img in joined["images"].as_array().expect("images") {
        assert_eq!(img["outcome"], "patched");
        let served = skopeo_creds(img["target"].as_str().expect("target"));
        assert_eq!(Some(served.as_str()), img["patched_digest"].as_str());
        let planned = plan_json["images"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["source"] == img["source"]))
            .expect("planned image");
        assert_eq!(planned["patched_digest"], img["patched_digest"]);
    }
    let join_md = std::fs::read_to_string(wf.join("summary-join.md")).expect("join summary");
    assert!(
        join_md.contains("### runner-patch verify: every image checks out"),
        "{join_md}"
    );

    // rollback takes the joined map as any map: every tag is back on its original.
    let joined_path = wf.join("artifacts/runner-patch-map/runner-patch-map.json");
    let rb = Tool::new("rollback")
        .cwd(work.path())
        .arg("--digest-map")
        .arg(&joined_path)
        .env("DOCKER_CONFIG", &cfg)
        .run();
    assert_eq!(rb.code, 0, "{}{}", rb.stdout, rb.stderr);
    for tag in DEMO_CUDA {
        let original = seeded["images"][*tag]["digest"].as_str().expect("digest");
        assert_eq!(
            skopeo_creds(&format!("{}:{tag}", reg.repo())),
            original,
            "{tag}"
        );
    }
}

#[test]
fn example_workflow_without_credentials_fails_in_plan_and_never_reaches_apply() {
    let (reg, _) = registry_with_password();
    let work = tempfile::tempdir().expect("tmp");
    let (code, log, report) = run_example(&reg, work.path(), &[]);
    assert_eq!(code, 1, "{log}");
    assert_eq!(job(&report, "plan")["result"], "failure", "{report:#}");
    assert_eq!(job(&report, "apply")["result"], "skipped", "{report:#}");
    assert!(log.contains("no credentials found"), "{log}");
}

/// The digest a reference serves, read by skopeo with the test's htpasswd credentials.
fn skopeo_creds(reference: &str) -> String {
    let out = Command::new("skopeo")
        .args([
            "inspect",
            "--raw",
            "--tls-verify=false",
            "--creds",
            &format!("{USER}:{PASSWORD}"),
        ])
        .arg(format!("docker://{reference}"))
        .output()
        .expect("skopeo");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sha256_hex(&out.stdout)
}

/// The tool in `cwd` with exactly the GitHub variables given (none inherited from this
/// process), its scan cache beside `cwd` so that only what the run writes lands in `cwd`.
fn with_github(tool: Tool, cwd: &Path, github: &[(&str, &str)]) -> Tool {
    tool.cwd(cwd)
        .env("XDG_CACHE_HOME", cwd.with_extension("cache"))
        .envs(github.iter().copied())
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn step_summary_matches_the_digest_map_and_warnings_are_workflow_commands() {
    let reg = Registry::start();
    // An attestation child (dropped, with a warning), a refusal, and a plain patched image.
    let tags = [
        "cuda12.9-vllm0.25.1",
        "cuda12.9-vllm0.27.1-noshape",
        "cuda12.8-vllm0.27.1",
    ];
    reg.seed(&tags);
    let apply = Tool::new("apply")
        .backend("cuda")
        .repo(reg.repo())
        .json()
        .tags(tags);

    // Outside GitHub Actions: no summary file, no workflow commands, a plain warning line.
    let plain = tempfile::tempdir().expect("tmp");
    let elsewhere = apply.clone().args(["--tag-suffix", "-elsewhere"]);
    let run = with_github(elsewhere, plain.path(), &[]).run();
    assert_eq!(run.code, 1, "{}", run.stderr);
    // Only the digest map (and the lock beside it) was written.
    let files = files_in(plain.path());
    assert!(files.contains(&"runner-patch-manifest.json".to_owned()));
    assert!(
        files
            .iter()
            .all(|f| f.contains("runner-patch-manifest.json")),
        "{files:?}"
    );
    assert!(!run.stderr.contains("::warning"), "{}", run.stderr);
    assert!(!run.stdout.contains("::"), "{}", run.stdout);
    assert!(
        run.stderr.contains("WARN") && run.stderr.contains("attestation manifest"),
        "{}",
        run.stderr
    );

    // In GitHub Actions: the summary is appended (after what was there) and matches the map;
    // the warning is a workflow command on stderr, stdout stays JSON.
    let gh = tempfile::tempdir().expect("tmp");
    let summary = gh.path().join("step-summary.md");
    std::fs::write(&summary, "earlier step\n").expect("write");
    let s = summary.to_str().expect("utf8");
    let apply = with_github(
        apply,
        gh.path(),
        &[("GITHUB_ACTIONS", "true"), ("GITHUB_STEP_SUMMARY", s)],
    )
    .run();
    assert_eq!(apply.code, 1, "{}", apply.stderr);
    let map = apply.json();
    let warnings: Vec<&str> = apply
        .stderr
        .lines()
        .filter(|l| l.starts_with("::warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", apply.stderr);
    assert!(
        warnings[0].starts_with("::warning title=runner-patch::")
            && warnings[0].contains("attestation manifest"),
        "{}",
        warnings[0]
    );
    assert!(!apply.stderr.contains(" WARN "), "{}", apply.stderr);
    let md = std::fs::read_to_string(&summary).expect("summary");
    let md = md
        .strip_prefix("earlier step\n")
        .expect("appended, not replaced");
    assert!(
        md.starts_with("### runner-patch apply: 3 images (2 patched, 1 refused)"),
        "{md}"
    );
    assert_summary_matches(md, &map);
    assert!(md.contains("Refused or failed:"), "{md}");
    let refused = map["images"]
        .as_array()
        .and_then(|a| a.iter().find(|i| i["outcome"] == "refused"))
        .expect("a refused image");
    assert!(md.contains(refused["source"].as_str().expect("source")));

    // verify appends its own table.
    let v = with_github(
        Tool::new("verify").digest_map("runner-patch-manifest.json"),
        gh.path(),
        &[("GITHUB_ACTIONS", "true"), ("GITHUB_STEP_SUMMARY", s)],
    )
    .run();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
    let md = std::fs::read_to_string(&summary).expect("summary");
    let verify = md
        .split_once("### runner-patch verify: every image checks out")
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("{md}"));
    let patched: Vec<&str> = map["images"]
        .as_array()
        .expect("images")
        .iter()
        .filter(|i| i["outcome"] == "patched")
        .filter_map(|i| i["target"].as_str())
        .collect();
    assert!(!patched.is_empty());
    for t in patched {
        assert!(
            verify.contains(&format!("| `{t}` | all | ok |")),
            "{verify}"
        );
    }
}

/// Layer digests of the fixture images in a seed summary.
fn fixture_layers(summary: &Value) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for img in summary["images"].as_object().expect("images").values() {
        for p in img["platforms"].as_object().expect("platforms").values() {
            for l in p["layers"].as_array().expect("layers") {
                out.insert(l.as_str().expect("digest").to_owned());
            }
        }
    }
    out
}

/// Blob GETs of these layers in the registry's access log since `from` (a log length).
fn layer_gets(
    reg: &Registry,
    from: usize,
    layers: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    layer_gets_in(&reg.log()[from..], layers)
}

/// Blob GETs of these layers in a piece of the registry's access log.
fn layer_gets_in(log: &str, layers: &std::collections::BTreeSet<String>) -> Vec<String> {
    log.lines()
        .filter_map(|l| {
            let req = l.split('"').nth(1)?;
            let path = req.strip_prefix("GET ")?.split_whitespace().next()?;
            let digest = path.rsplit_once("/blobs/")?.1;
            layers.contains(digest).then(|| digest.to_owned())
        })
        .collect()
}

fn cache_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("v3"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "json"));
    v.sort();
    v
}

#[test]
fn apply_after_plan_reads_no_layer_again_and_a_bad_cache_entry_is_never_trusted() {
    let reg = Registry::start();
    let tag = "cuda12.9-vllm0.27.1";
    let layers = fixture_layers(&reg.seed(&[tag]));
    let work = tempfile::tempdir().expect("tmp");
    let cache = work.path().join("scans");
    let c = cache.to_str().expect("utf8");
    let args = |cmd: &str, extra: &[&str]| -> Tool {
        Tool::new(cmd)
            .cwd(work.path())
            .backend("cuda")
            .repo(reg.repo())
            .tag(tag)
            .json()
            .arg("-v")
            .args(extra)
    };
    let run = |tool: Tool| {
        let from = reg.log().len();
        let r = tool.run();
        std::thread::sleep(std::time::Duration::from_millis(200));
        (r, layer_gets(&reg, from, &layers))
    };
    let digests = |r: &Run| -> Vec<Value> {
        r.json()["images"]
            .as_array()
            .expect("images")
            .iter()
            .map(|i| {
                i["platforms"]
                    .as_array()
                    .expect("p")
                    .iter()
                    .map(|p| p["patched_digest"].clone())
                    .collect()
            })
            .collect()
    };

    // The first plan reads the layers down to the file and records each scan.
    let (plan1, gets1) = run(args("plan", &["--cache-dir", c]));
    assert_eq!(plan1.code, 0, "{}", plan1.stderr);
    assert!(!gets1.is_empty(), "the first plan read no layer");
    let entries = cache_entries(&cache);
    assert_eq!(
        entries.len(),
        gets1.len(),
        "one entry per layer read: {entries:?}"
    );

    // A second plan reads none, and plans the same images.
    let (plan2, gets2) = run(args("plan", &["--cache-dir", c]));
    assert_eq!(plan2.code, 0, "{}", plan2.stderr);
    assert!(gets2.is_empty(), "second plan read {gets2:?}");
    assert_eq!(digests(&plan2), digests(&plan1));

    // --no-cache reads every layer again.
    let (uncached, gets3) = run(args("plan", &["--no-cache"]));
    assert_eq!(uncached.code, 0, "{}", uncached.stderr);
    assert_eq!(gets3.len(), gets1.len());
    assert_eq!(digests(&uncached), digests(&plan1));

    // An entry edited on disk is detected: its layer (only it) is read again and the entry
    // rewritten, after which it is used again.
    let victim = &entries[0];
    let mut bytes = std::fs::read(victim).expect("read");
    let i = bytes.len() / 2;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    std::fs::write(victim, &bytes).expect("write");
    let (plan4, gets4) = run(args("plan", &["--cache-dir", c]));
    assert_eq!(plan4.code, 0, "{}", plan4.stderr);
    assert_eq!(gets4.len(), 1, "{gets4:?}\n{}", plan4.stderr);
    assert!(plan4.stderr.contains("ignored"), "{}", plan4.stderr);
    assert_eq!(digests(&plan4), digests(&plan1));
    let (_, gets5) = run(args("plan", &["--cache-dir", c]));
    assert!(
        gets5.is_empty(),
        "the rewritten entry was not used: {gets5:?}"
    );

    // A foreign entry (another layer's, under this layer's name) is not trusted either.
    let other = std::fs::read(&entries[1]).expect("read");
    std::fs::write(&entries[0], other).expect("write");
    let (plan6, gets6) = run(args("plan", &["--cache-dir", c]));
    assert_eq!(plan6.code, 0, "{}", plan6.stderr);
    assert_eq!(gets6.len(), 1, "{gets6:?}");
    assert!(
        plan6.stderr.contains("belongs to layer"),
        "{}",
        plan6.stderr
    );

    // apply after plan: no layer is read, the result is what plan showed, verify agrees.
    let (applied, gets7) = run(args("apply", &["--cache-dir", c]));
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    assert!(gets7.is_empty(), "apply read {gets7:?}");
    assert_eq!(digests(&applied), digests(&plan1));
    let map = applied.json();
    assert_eq!(
        Some(served(map["images"][0]["target"].as_str().expect("target")).as_str()),
        map["images"][0]["patched_digest"].as_str()
    );
    let v = Tool::new("verify")
        .cwd(work.path())
        .digest_map("runner-patch-manifest.json")
        .run();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
}

/// The layers of one tag of a fixture summary.
fn tag_layers(summary: &Value, tag: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for p in summary["images"][tag]["platforms"]
        .as_object()
        .expect("platforms")
        .values()
    {
        for l in p["layers"].as_array().expect("layers") {
            out.insert(l.as_str().expect("digest").to_owned());
        }
    }
    out
}

#[test]
fn a_changed_layer_under_the_same_tag_is_scanned_again_never_served_from_the_cache() {
    let reg = Registry::start();
    let (tag, fixed) = ("cuda13.0-vllm0.30.0", "cuda13.0-vllm0.33.0");
    let summary = reg.seed(&[tag, fixed]);
    let (before, after) = (tag_layers(&summary, tag), tag_layers(&summary, fixed));
    let changed: std::collections::BTreeSet<String> = after.difference(&before).cloned().collect();
    assert!(!changed.is_empty(), "the fixtures share every layer");
    let work = tempfile::tempdir().expect("tmp");
    let cache = work.path().join("scans");
    let plan = || {
        let from = reg.log().len();
        let r = Tool::new("plan")
            .cwd(work.path())
            .backend("cuda")
            .repo(reg.repo())
            .tag(tag)
            .json()
            .arg("--cache-dir")
            .arg(&cache)
            .run();
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(r.code, 0, "{}", r.stderr);
        let all: std::collections::BTreeSet<String> = before.union(&after).cloned().collect();
        (
            r.json()["images"][0]["outcome"].clone(),
            layer_gets(&reg, from, &all),
        )
    };
    let (first, _) = plan();
    assert_eq!(first, "patched");
    let (again, none) = plan();
    assert_eq!((again, none), (Value::from("patched"), Vec::new()));
    // The tag now serves another image: its new layers are read, whatever the cache holds
    // for the tag's old ones, and the plan is the new image's.
    retag(&reg, fixed, tag);
    let (moved, gets) = plan();
    assert_eq!(
        moved, "not-affected",
        "the plan answered from the old layers"
    );
    let read: std::collections::BTreeSet<String> = gets.into_iter().collect();
    assert!(
        changed.iter().all(|l| read.contains(l)),
        "changed layers not read: {changed:?}, read {read:?}"
    );
    assert!(
        read.is_subset(&changed),
        "layers the cache holds were read again: {read:?}"
    );
}

#[test]
fn a_release_of_eight_tags_sharing_layers_reads_each_layer_blob_once() {
    let reg = Registry::start();
    let (a, b) = ("cuda12.9-vllm0.27.1", "cuda12.8-vllm0.27.1");
    let summary = reg.seed(&[a, b]);
    let layers: std::collections::BTreeSet<String> = tag_layers(&summary, a)
        .union(&tag_layers(&summary, b))
        .cloned()
        .collect();
    // A release: each image under four tags (two CUDA versions' worth of names each).
    let mut tags = Vec::new();
    for (src, minors) in [
        (a, ["0.27.1", "0.27.2", "0.27.3", "0.27.4"]),
        (b, ["0.27.1", "0.27.5", "0.27.6", "0.27.7"]),
    ] {
        let prefix = src.split_once("-vllm").expect("tag").0;
        for m in minors {
            let t = format!("{prefix}-vllm{m}");
            if t != src {
                retag(&reg, src, &t);
            }
            tags.push(t);
        }
    }
    let work = tempfile::tempdir().expect("tmp");
    let from = reg.log().len();
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tags(&tags)
        .args(["--jobs", "8", "--no-cache", "--range-parallel", "1"])
        .digest_map("map.json")
        .json()
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let gets = layer_gets(&reg, from, &layers);
    let mut per: std::collections::BTreeMap<&str, usize> = Default::default();
    for g in &gets {
        *per.entry(g.as_str()).or_default() += 1;
    }
    assert!(!per.is_empty(), "the run read no layer");
    assert!(
        per.values().all(|n| *n == 1),
        "a layer blob was read more than once across the release's tags: {per:?}"
    );
    let map = run.json();
    let patched = map["images"]
        .as_array()
        .expect("images")
        .iter()
        .filter(|i| i["outcome"] == "patched")
        .count();
    assert_eq!(patched, tags.len(), "{map:#}");
}
