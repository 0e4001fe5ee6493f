//! Layers read as parallel ranges (issue 20), through the fault proxy in front of the real
//! registry: the ranges the registry's access log shows, and every way a range can go wrong
//! (a registry that ignores `Range`, a wrong `Content-Range`, a range cut or stalled, a
//! redirect whose signed location expires, a wrong byte): each run ends with the image a
//! plain read gives, or one clear error, within its bounds.
//!
//! The fixture layers are small, so the tool is told to use 16 KiB ranges
//! (`RUNNER_PATCH_RANGE_SIZE`): the vLLM layer is then about ten ranges.

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::harness::*;

const TAG: &str = "cuda12.9-vllm0.27.1";
const RANGE: u64 = 16 * 1024;
const USER: &str = "ranges-bot";
const PASSWORD: &str = "pw-Rg4nX9q";

/// A registry seeded with the tag, a fault proxy in front of it, and a work folder.
struct Setup {
    reg: Registry,
    proxy: Daemon,
    work: tempfile::TempDir,
    /// The amd64 platform's vLLM layer (the one holding the file) and its size.
    layer: String,
    layer_size: u64,
}

impl Setup {
    fn new(proxy_args: &[&str]) -> Self {
        let reg = Registry::start();
        let seeded = reg.seed(&[TAG]);
        let amd = &seeded["images"][TAG]["platforms"]["linux/amd64"];
        let at = amd["file_layer"].as_u64().expect("file_layer") as usize;
        let layer = amd["layers"][at].as_str().expect("layer").to_owned();
        let hex = layer.trim_start_matches("sha256:");
        let data = reg
            .dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data");
        let layer_size = std::fs::metadata(data).expect("layer blob").len();
        assert!(
            layer_size > 4 * RANGE,
            "the vLLM layer is {layer_size} bytes"
        );
        let work = tempfile::tempdir().expect("tmp");
        std::fs::write(work.path().join("plan.json"), "[]").expect("plan");
        let (plan, log) = (work.path().join("plan.json"), work.path().join("proxy.log"));
        let mut args = vec![
            "--upstream",
            reg.addr.as_str(),
            "--plan",
            plan.to_str().expect("utf8"),
            "--log",
            log.to_str().expect("utf8"),
        ];
        args.extend_from_slice(proxy_args);
        let proxy = Daemon::start("fault_proxy", &args);
        Setup {
            reg,
            proxy,
            work,
            layer,
            layer_size,
        }
    }

    fn faults(&self, rules: Value) {
        let tmp = self.work.path().join("plan.json.tmp");
        std::fs::write(&tmp, rules.to_string()).expect("plan");
        std::fs::rename(tmp, self.work.path().join("plan.json")).expect("plan");
    }

    fn repo(&self) -> String {
        format!("{}/gpustack/runner", self.proxy.addr())
    }

    /// `COMMAND --json` of the tag through the proxy in 16 KiB ranges, with `extra` flags.
    fn tool(&self, command: &str, extra: &[&str]) -> Tool {
        Tool::new(command)
            .cwd(self.work.path())
            .backend("cuda")
            .repo(self.repo())
            .tag(TAG)
            .json()
            .args(["--no-cache", "--idle-timeout", "2"])
            .args(extra)
            .env("RUNNER_PATCH_RANGE_SIZE", RANGE.to_string())
    }

    /// The proxy's log lines since `from` lines.
    fn proxy_log(&self, from: usize) -> Vec<Value> {
        std::fs::read_to_string(self.work.path().join("proxy.log"))
            .unwrap_or_default()
            .lines()
            .skip(from)
            .map(|l| serde_json::from_str(l).expect("log line"))
            .collect()
    }

    fn proxy_lines(&self) -> usize {
        self.proxy_log(0).len()
    }
}

/// The patched digests of the tag's image and platforms in a plan or apply's map.
fn digests(map: &Value) -> Vec<String> {
    let img = &map["images"][0];
    let mut out = vec![img["patched_digest"].as_str().unwrap_or("none").to_owned()];
    for p in img["platforms"].as_array().expect("platforms") {
        out.push(p["patched_digest"].as_str().unwrap_or("none").to_owned());
    }
    out
}

/// Runs `tool` within a bound generous for a stall or two, never more.
fn bounded(tool: &Tool) -> Run {
    tool.measured(Duration::from_secs(90)).run
}

/// The plan a plain single-stream read gives through the same proxy (no faults).
fn expected(s: &Setup, extra: &[&str]) -> Vec<String> {
    s.faults(json!([]));
    let plain = bounded(&s.tool("plan", &[&["--range-parallel", "0"], extra].concat()));
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    digests(&plain.json())
}

/// The GETs of `digest` in the proxy log lines: (listener, Range header, status).
fn gets_of(lines: &[Value], digest: &str) -> Vec<(String, Option<String>, u64)> {
    lines
        .iter()
        .filter(|l| l["method"] == "GET" && l["path"].as_str().is_some_and(|p| p.contains(digest)))
        .map(|l| {
            (
                l["listener"].as_str().unwrap_or("").to_owned(),
                l["range"].as_str().map(str::to_owned),
                l["status"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Where a `Range: bytes=a-b` header starts.
fn start_of(range: Option<&str>) -> Option<u64> {
    range?
        .strip_prefix("bytes=")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// The blob GETs of `digest` in the registry's access log since `from`: (status, size).
fn registry_gets(reg: &Registry, from: usize, digest: &str) -> Vec<(u64, u64)> {
    reg.log()[from..]
        .lines()
        .filter_map(|l| {
            let req = l.split('"').nth(1)?;
            let path = req.strip_prefix("GET ")?.split_whitespace().next()?;
            if !path.ends_with(&format!("/blobs/{digest}")) {
                return None;
            }
            let mut rest = l.split('"').nth(2)?.split_whitespace();
            Some((rest.next()?.parse().ok()?, rest.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn apply_reads_big_layers_in_ranges_the_registry_log_shows_them_and_the_image_is_the_same() {
    let s = Setup::new(&[]);
    let want = expected(&s, &[]);
    let (from_reg, from_px) = (s.reg.log().len(), s.proxy_lines());
    let run = bounded(&s.tool("apply", &[]));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(digests(&run.json()), want, "ranges gave another image");
    // The registry served the layer as 206 answers of at most one range each, adding up to
    // the blob, and each range was asked for once.
    std::thread::sleep(Duration::from_millis(300));
    let served = registry_gets(&s.reg, from_reg, &s.layer);
    assert!(
        served.iter().all(|(st, n)| *st == 206 && *n <= RANGE),
        "{served:?}"
    );
    assert_eq!(served.iter().map(|(_, n)| n).sum::<u64>(), s.layer_size);
    let asked: BTreeSet<String> = gets_of(&s.proxy_log(from_px), &s.layer)
        .into_iter()
        .filter_map(|(_, r, _)| r)
        .collect();
    let parts: BTreeSet<String> = (0..s.layer_size)
        .step_by(RANGE as usize)
        .map(|a| format!("bytes={a}-{}", (a + RANGE).min(s.layer_size) - 1))
        .collect();
    assert_eq!(asked, parts);
    let v = Tool::new("verify")
        .cwd(s.work.path())
        .digest_map("runner-patch-manifest.json")
        .env("RUNNER_PATCH_RANGE_SIZE", RANGE.to_string())
        .run();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
}

#[test]
fn a_registry_that_ignores_ranges_is_read_as_before_one_request_per_layer() {
    let s = Setup::new(&[]);
    let want = expected(&s, &[]);
    s.faults(json!([{"match": {"method": "GET", "path_regex": "/blobs/"},
                     "fault": {"kind": "ignore_range"}}]));
    let from = s.proxy_lines();
    let run = bounded(&s.tool("plan", &[]));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(digests(&run.json()), want);
    let gets = gets_of(&s.proxy_log(from), &s.layer);
    assert_eq!(gets.len(), 1, "{gets:?}");
    assert_eq!(gets[0].2, 200);
    assert!(!run.stderr.contains("WARN"), "{}", run.stderr);
}

#[test]
fn a_range_answered_wrongly_cut_or_stalled_is_read_again_and_the_image_is_the_same() {
    let s = Setup::new(&[]);
    let want = expected(&s, &[]);
    let third = format!("^bytes={}-", 2 * RANGE);
    let cases = [
        (
            "wrong Content-Range",
            json!({"kind": "set_header", "name": "Content-Range",
                                       "value": format!("bytes 0-{}/{}", RANGE - 1, s.layer_size)}),
        ),
        ("whole blob", json!({"kind": "ignore_range"})),
        ("cut", json!({"kind": "reset_after_bytes", "bytes": 1000})),
        (
            "stalled",
            json!({"kind": "stall_after_bytes", "bytes": 1000}),
        ),
    ];
    for (name, fault) in cases {
        s.faults(json!([{"match": {"method": "GET", "path_regex": s.layer,
                                   "headers": {"Range": third}, "nth": 1},
                         "fault": fault}]));
        let from = s.proxy_lines();
        let run = bounded(&s.tool("plan", &[]));
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        assert_eq!(digests(&run.json()), want, "{name}");
        assert!(
            run.stderr.contains("trying it again"),
            "{name}: {}",
            run.stderr
        );
        let gets = gets_of(&s.proxy_log(from), &s.layer);
        let thirds = gets
            .iter()
            .filter(|(_, r, _)| start_of(r.as_deref()).is_some_and(|a| a / RANGE == 2))
            .count();
        assert_eq!(
            thirds, 2,
            "{name}: the range alone was asked again: {gets:?}"
        );
    }
}

#[test]
fn a_range_that_fails_twice_leaves_the_rest_of_the_layer_to_one_stream() {
    let s = Setup::new(&[]);
    let want = expected(&s, &[]);
    // Every request ending at the third range's end is cut: its first try and its retry (from
    // where the first stopped); the plain stream that takes over asks for the open rest.
    let third = format!("^bytes=[0-9]+-{}$", 3 * RANGE - 1);
    s.faults(
        json!([{"match": {"method": "GET", "path_regex": s.layer, "headers": {"Range": third}},
                     "fault": {"kind": "reset_after_bytes", "bytes": 100}}]),
    );
    let from = s.proxy_lines();
    let run = bounded(&s.tool("plan", &[]));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(digests(&run.json()), want);
    assert!(run.stderr.contains("as one stream"), "{}", run.stderr);
    let gets = gets_of(&s.proxy_log(from), &s.layer);
    let rest: Vec<_> = gets
        .iter()
        .filter(|(_, r, st)| r.as_deref().is_some_and(|r| r.ends_with('-')) && *st == 206)
        .collect();
    assert_eq!(rest.len(), 1, "one GET for the rest of the layer: {gets:?}");
    assert!(
        start_of(rest[0].1.as_deref()).is_some_and(|a| (2 * RANGE..3 * RANGE).contains(&a)),
        "it starts where the bytes in order stopped, inside the third range: {gets:?}"
    );
}

#[test]
fn a_wrong_byte_in_every_answer_is_one_clear_error_never_an_image() {
    let s = Setup::new(&[]);
    s.faults(json!([{"match": {"method": "GET", "path_regex": s.layer},
                     "fault": {"kind": "flip_byte", "offset": 100}}]));
    let run = bounded(&s.tool("plan", &[]));
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    // The inflate or the tar reader stops at the damage (or the digest check at the end):
    // one error line, naming the layer; nothing is planned.
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", run.stderr);
    assert!(errors[0].contains(&s.layer), "{}", run.stderr);
    assert_eq!(run.json()["images"], json!([]), "an image was planned");
}

#[test]
fn ranges_follow_a_redirect_without_credentials_and_renew_it_when_it_expires() {
    let s = Setup::new(&["--user", USER, "--password", PASSWORD]);
    let cfg = s.work.path().join("docker");
    std::fs::create_dir_all(&cfg).expect("mkdir");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::write(
        cfg.join("config.json"),
        json!({"auths": {s.proxy.addr(): {"auth": auth}}}).to_string(),
    )
    .expect("config");
    let with_creds = |t: Tool| t.env("DOCKER_CONFIG", &cfg);
    s.faults(json!([]));
    let plain = bounded(&with_creds(s.tool("plan", &["--range-parallel", "0"])));
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    // Every blob GET is redirected to the other origin, whose signed location serves three
    // requests and then answers 403 (expired).
    s.faults(json!([{"match": {"method": "GET", "path_regex": "/blobs/"},
                     "fault": {"kind": "redirect", "valid_for": 3}}]));
    let from = s.proxy_lines();
    let run = bounded(&with_creds(s.tool("plan", &["-v"])));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(digests(&run.json()), digests(&plain.json()));
    assert!(!run.stderr.contains(PASSWORD));
    let lines = s.proxy_log(from);
    let gets = gets_of(&lines, &s.layer);
    let at = |l: &str| gets.iter().filter(|g| g.0 == l).count();
    assert!(
        at("registry") >= 2,
        "the expired location was renewed: {gets:?}"
    );
    assert!(
        at("elsewhere") > (s.layer_size / RANGE) as usize,
        "{gets:?}"
    );
    assert!(
        gets.iter().any(|g| g.0 == "elsewhere" && g.2 == 403),
        "{gets:?}"
    );
    for l in &lines {
        if l["listener"] == "elsewhere" {
            assert_eq!(l["authorization"], false, "credentials sent elsewhere: {l}");
        }
    }
}

#[test]
fn zstd_layers_are_read_in_ranges_like_gzip_ones() {
    let s = Setup::new(&[]);
    // The same image with zstd layers, in another repository of the same registry.
    let zrepo = format!("{}/zstd/runner", s.reg.addr);
    run_tool(
        "skopeo",
        &[
            "copy",
            "-q",
            "--all",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            "--dest-compress",
            "--dest-compress-format",
            "zstd",
            &format!("docker://{}:{TAG}", s.reg.repo()),
            &format!("docker://{zrepo}:{TAG}"),
        ],
    );
    let plan = |extra: &[&str]| {
        let run = bounded(
            &Tool::new("plan")
                .cwd(s.work.path())
                .backend("cuda")
                .repo(&zrepo)
                .tag(TAG)
                .json()
                .args(["--no-cache"])
                .args(extra)
                .env("RUNNER_PATCH_RANGE_SIZE", RANGE.to_string()),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json()
    };
    let from = s.reg.log().len();
    let ranged = plan(&[]);
    std::thread::sleep(Duration::from_millis(300));
    let partial = s.reg.log()[from..]
        .lines()
        .filter(|l| l.contains("\"GET /v2/zstd/runner/blobs/sha256:") && l.contains("\" 206 "))
        .count();
    assert!(partial > 4, "the zstd layers were not read in ranges");
    assert_eq!(digests(&ranged), digests(&plan(&["--range-parallel", "0"])));
    // (The image read was zstd indeed.)
    let list: Value = serde_json::from_slice(&skopeo_raw(&format!("{zrepo}:{TAG}"))).expect("list");
    let child = list["manifests"][0]["digest"].as_str().expect("child");
    let m: Value = serde_json::from_slice(&skopeo_raw(&format!("{zrepo}@{child}"))).expect("child");
    assert!(
        m["layers"]
            .as_array()
            .expect("layers")
            .iter()
            .all(|l| l["mediaType"] == "application/vnd.oci.image.layer.v1.tar+zstd"),
        "{m:#}"
    );
}
