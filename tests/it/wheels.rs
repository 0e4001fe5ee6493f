//! The `wheels` kind through the engine against the real registry: an image with an installed
//! distribution (tests/support/wheels_image.py), a wheel built here, locked by path and by URL
//! (served by a small HTTP server in the test); plan names the change and the pip-check
//! warning and writes nothing; apply installs what umoci unpacks (the module, RECORD, the
//! launcher; the old version's files gone) and the map carries the warning; a re-run is
//! already patched and pushes nothing; a hash mismatch stops the run before any request.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;

use crate::harness::{python, sha256_hex, unpack, Registry, Tool, REPO};

const TAG: &str = "cuda12.9-vllm0.27.1";
const SITE: &str = "usr/local/lib/python3.11/dist-packages";
const BROKEN: &str = "needs-demo 1.0 has requirement demo<2, but you have demo 2.0.";

fn record_row(path: &str, data: &[u8]) -> String {
    use base64::Engine as _;
    use sha2::Digest;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(data));
    format!("{path},sha256={b64},{}", data.len())
}

/// demo 2.0 as a wheel (a module, a console script), built with the zip crate.
fn wheel() -> Vec<u8> {
    let mut files: Vec<(&str, Vec<u8>)> = vec![
        (
            "demo/__init__.py",
            b"V = 2\ndef main():\n    return 0\n".to_vec(),
        ),
        (
            "demo-2.0.dist-info/METADATA",
            b"Metadata-Version: 2.1\nName: demo\nVersion: 2.0\n\n".to_vec(),
        ),
        (
            "demo-2.0.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .to_vec(),
        ),
        (
            "demo-2.0.dist-info/entry_points.txt",
            b"[console_scripts]\ndemo = demo:main\n".to_vec(),
        ),
    ];
    let mut record: Vec<String> = files.iter().map(|(p, d)| record_row(p, d)).collect();
    record.push("demo-2.0.dist-info/RECORD,,".into());
    files.push((
        "demo-2.0.dist-info/RECORD",
        (record.join("\n") + "\n").into_bytes(),
    ));
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(0o644);
    for (p, d) in &files {
        z.start_file(*p, opts).expect("entry");
        z.write_all(d).expect("write");
    }
    z.finish().expect("zip").into_inner()
}

/// A patch folder locking demo 2.0 by `path` (the wheel beside the lock) or by `url`.
fn folder(dir: &Path, name: &str, wheel: &[u8], url: Option<&str>, sha256: &str) -> String {
    let f = dir.join(name);
    std::fs::create_dir_all(&f).expect("mkdir");
    let file = "demo-2.0-py3-none-any.whl";
    let source = match url {
        Some(u) => format!("url = \"{u}\""),
        None => {
            std::fs::write(f.join(file), wheel).expect("wheel");
            format!("path = \"{file}\"")
        }
    };
    std::fs::write(
        f.join("pylock.toml"),
        format!("lock-version = \"1.0\"\ncreated-by = \"test\"\n\n[[packages]]\nname = \"demo\"\nversion = \"2.0\"\n\n[[packages.wheels]]\nname = \"{file}\"\n{source}\nhashes = {{ sha256 = \"{sha256}\" }}\n"),
    )
    .expect("lock");
    std::fs::write(
        f.join("patch.toml"),
        format!("id = \"demo-2.0-{name}\"\nkind = \"wheels\"\ntitle = \"demo 2.0\"\nbackends = [\"cuda\"]\nlock = \"pylock.toml\"\n"),
    )
    .expect("patch.toml");
    f.display().to_string()
}

/// Serves `body` at any path for `n` requests; returns the URL of the wheel.
fn serve(body: Vec<u8>, n: usize) -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!(
        "http://{}/demo-2.0-py3-none-any.whl",
        l.local_addr().expect("addr")
    );
    std::thread::spawn(move || {
        for s in l.incoming().take(n) {
            let Ok(mut s) = s else { continue };
            let mut r = BufReader::new(s.try_clone().expect("clone"));
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) <= 2 {
                    break;
                }
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&body);
        }
    });
    url
}

fn push_image(reg: &Registry) {
    let addr = reg.repo().trim_end_matches(&format!("/{REPO}")).to_owned();
    let out = python("tests.support.wheels_image")
        .args(["--registry", &addr, "--repository", REPO, "--tag", TAG])
        .output()
        .expect("run wheels_image");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn wheels_install_as_pip_and_rerun_already_patched() {
    let reg = Registry::start();
    push_image(&reg);
    let work = tempfile::tempdir().expect("tmp");
    let w = wheel();
    let hex = sha256_hex(&w).trim_start_matches("sha256:").to_owned();
    let by_path = folder(work.path(), "path", &w, None, &hex);
    let tool = |cmd: &str, patch: &str| {
        Tool::new(cmd)
            .cwd(work.path())
            .env("XDG_CACHE_HOME", work.path().join("cache"))
            .backend("cuda")
            .repo(reg.repo())
            .tag(TAG)
            .patch(patch)
    };

    // plan: the change and the warning, nothing written.
    let before = reg.storage();
    let plan = tool("plan", &by_path).json().run();
    assert_eq!(plan.code, 0, "{}\n{}", plan.stdout, plan.stderr);
    let p = &plan.json()["images"][0]["platforms"][0];
    assert_eq!(p["outcome"], "patched", "{p}");
    assert!(
        p["reason"]
            .as_str()
            .expect("reason")
            .contains("demo 1.0 -> 2.0"),
        "{p}"
    );
    assert_eq!(p["warnings"], serde_json::json!([BROKEN]), "{p}");
    assert_eq!(reg.storage(), before, "plan writes nothing");

    // apply: what umoci unpacks is what pip leaves.
    let map = work.path().join("map.json");
    let run = tool("apply", &by_path).digest_map(&map).run();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(&format!("warning          {BROKEN}")),
        "{}",
        run.stdout
    );
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&map).expect("map")).expect("json");
    assert_eq!(
        recorded["images"][0]["platforms"][0]["warnings"],
        serde_json::json!([BROKEN])
    );
    let reference = format!("{}:{TAG}", reg.repo());
    let (rootfs, _) = unpack(&reference, "amd64", &work.path().join("patched"));
    let site = rootfs.join(SITE);
    assert_eq!(
        std::fs::read_to_string(site.join("demo/__init__.py")).expect("module"),
        "V = 2\ndef main():\n    return 0\n"
    );
    assert!(!site.join("demo/old.py").exists(), "1.0's file removed");
    assert!(
        !site.join("demo-1.0.dist-info").exists(),
        "1.0's dist-info removed"
    );
    assert!(site.join("needs_demo-1.0.dist-info/RECORD").exists());
    let record = std::fs::read_to_string(site.join("demo-2.0.dist-info/RECORD")).expect("RECORD");
    assert!(record.contains("../../../bin/demo,sha256="), "{record}");
    assert!(record.contains("demo-2.0.dist-info/RECORD,,"), "{record}");
    let launcher = rootfs.join("usr/local/bin/demo");
    let text = std::fs::read_to_string(&launcher).expect("launcher");
    assert!(text.starts_with("#!/usr/bin/python3\n"), "{text}");
    assert!(text.contains("from demo import main"), "{text}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&launcher)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);

    // A re-run: already patched (the installed files' hashes read again), nothing pushed.
    let before = reg.storage();
    let again = tool("apply", &by_path).digest_map(&map).json().run();
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
    assert_eq!(
        again.json()["images"][0]["platforms"][0]["outcome"],
        "already-patched"
    );
    assert_eq!(reg.storage(), before, "a re-run pushes nothing");

    // verify passes on the map (the layer holds only the scheme's files, every RECORD hash
    // matches), with the patch folder at hand.
    let verify = Tool::new("verify")
        .cwd(work.path())
        .env("XDG_CACHE_HOME", work.path().join("cache"))
        .digest_map(&map)
        .patch(&by_path)
        .run();
    assert_eq!(verify.code, 0, "{}\n{}", verify.stdout, verify.stderr);

    // By URL: fetched, checked and already patched; a wrong hash stops before any request.
    let url = serve(w.clone(), 1);
    let by_url = folder(work.path(), "url", &w, Some(&url), &hex);
    let fetched = tool("plan", &by_url).json().run();
    assert_eq!(fetched.code, 0, "{}\n{}", fetched.stdout, fetched.stderr);
    assert_eq!(
        fetched.json()["images"][0]["platforms"][0]["outcome"],
        "already-patched"
    );
    let log = reg.log().len();
    let bad_url = serve(b"not the wheel".to_vec(), 1);
    let bad = folder(work.path(), "bad", &w, Some(&bad_url), &hex);
    // Another cache: the right wheel is not already there.
    let refused = tool("apply", &bad)
        .env("XDG_CACHE_HOME", work.path().join("other-cache"))
        .digest_map(work.path().join("bad.json"))
        .run();
    assert_eq!(refused.code, 2, "{}\n{}", refused.stdout, refused.stderr);
    assert!(
        refused.stderr.contains(&bad_url) && refused.stderr.contains(&hex),
        "{}",
        refused.stderr
    );
    assert_eq!(reg.storage(), before, "nothing pushed");
    assert_eq!(
        reg.log().len(),
        log,
        "no request before the inputs are right"
    );

    // rollback puts the tag back on the original image.
    let original = recorded["images"][0]["original_digest"].clone();
    let back = Tool::new("rollback")
        .cwd(work.path())
        .digest_map(&map)
        .run();
    assert_eq!(back.code, 0, "{}\n{}", back.stdout, back.stderr);
    let (rootfs, _) = unpack(&reference, "amd64", &work.path().join("restored"));
    let site = rootfs.join(SITE);
    assert!(
        site.join("demo-1.0.dist-info/RECORD").exists(),
        "{original}"
    );
    assert!(!site.join("demo-2.0.dist-info").exists(), "{original}");
}
