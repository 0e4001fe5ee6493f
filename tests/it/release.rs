//! What a pipeline downloads: the static binary from `make dist` (runs with an empty
//! environment and in a bare root with nothing but itself) and the tool's image from
//! `make image` (only the binary and CA certificates; run with podman where podman can run
//! containers). `make test` builds both first and sets RUNNER_PATCH_REQUIRE_DIST, so there
//! these tests cannot skip; a plain `cargo test` skips them, saying so, when they are not built.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::harness::*;

const TAG: &str = "cuda12.9-vllm0.27.1";

fn required() -> bool {
    std::env::var_os("RUNNER_PATCH_REQUIRE_DIST").is_some()
}

/// The `make dist` binary, or None (with a skip line) when it is not built and not required.
fn dist_bin() -> Option<PathBuf> {
    let p = root().join("dist/runner-patch-linux-amd64");
    if p.is_file() {
        return Some(p);
    }
    assert!(!required(), "{} is missing: run make dist", p.display());
    eprintln!(
        "SKIP: {} is not built (make dist; make test builds it)",
        p.display()
    );
    None
}

fn text(o: &Run) -> String {
    format!("{}{}", o.stdout, o.stderr)
}

/// `runner-patch plan --json` with an empty environment (`env -i`, but for no retries, so a
/// failure is quick), optionally in a chroot.
fn plan_bare(bin: &str, chroot: Option<&Path>, repo: &str) -> Run {
    let plan = Tool::new("plan")
        .bin(bin)
        .bare()
        .env("RUNNER_PATCH_RETRIES", "0")
        .backend("cuda")
        .repo(repo)
        .tag(TAG)
        .json();
    match chroot {
        Some(r) => plan.via(chroot_bin(), [r]),
        None => plan,
    }
    .run()
}

fn outcome(o: &Run) -> Value {
    let v: Value =
        serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)));
    v["images"][0].clone()
}

/// A root holding what the tool's image holds (the binary, the CA bundle) plus the
/// `/etc/hosts` a container runtime adds. (Without any CA bundle the HTTP client cannot be
/// built at all, even for a plain-HTTP registry; see the README.)
fn bare_root(dir: &Path, bin: &Path) -> PathBuf {
    let r = dir.join("root");
    std::fs::create_dir_all(r.join("etc/ssl/certs")).expect("mkdir");
    std::fs::copy(bin, r.join("runner-patch")).expect("copy");
    std::fs::copy(
        "/etc/ssl/certs/ca-certificates.crt",
        r.join("etc/ssl/certs/ca-certificates.crt"),
    )
    .expect("the CA bundle (Debian ca-certificates)");
    std::fs::write(r.join("etc/hosts"), "127.0.0.1 localhost\n::1 localhost\n").expect("hosts");
    r
}

/// Whether chroot works here (it needs CAP_SYS_CHROOT); says why not.
/// chroot's own path: the child's environment is emptied, so no PATH lookup happens there.
fn chroot_bin() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join("chroot"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| "chroot".into())
}

fn chroot_works(root: &Path, bin: &str) -> Result<(), String> {
    let o = Tool::new("--version")
        .bin(bin)
        .via(chroot_bin(), [root])
        .bare()
        .try_run()
        .map_err(|e| format!("chroot: {e}"))?;
    if o.code == 0 {
        Ok(())
    } else {
        Err(text(&o).trim().to_owned())
    }
}

#[test]
fn dist_binary_is_static_and_runs_plan_with_an_empty_environment_and_in_a_bare_root() {
    let Some(bin) = dist_bin() else { return };
    let bytes = std::fs::read(&bin).expect("read");
    let sums = std::fs::read_to_string(bin.with_extension("sha256")).expect("sha256 file");
    assert_eq!(
        sums,
        format!(
            "{}  runner-patch-linux-amd64\n",
            sha256_hex(&bytes).trim_start_matches("sha256:")
        )
    );
    let file = Run::from(Command::new("file").arg(&bin).output().expect("file"));
    let file = text(&file);
    assert!(
        file.contains("statically linked") || file.contains("static-pie linked"),
        "{file}"
    );
    assert!(file.contains(", stripped"), "{file}");
    let ldd = text(&Run::from(
        Command::new("ldd").arg(&bin).output().expect("ldd"),
    ));
    assert!(
        ldd.contains("not a dynamic executable") || ldd.contains("statically linked"),
        "{ldd}"
    );

    let b = bin.to_str().expect("utf8");
    let version = Tool::new("--version").bin(b).bare().run();
    let version = version.stdout.trim().to_owned();
    let commit = version
        .strip_prefix(&format!(
            "runner-patch {} (commit ",
            env!("CARGO_PKG_VERSION")
        ))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("--version says {version:?}"));
    assert!(
        commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{version}"
    );
    if required() {
        let head = Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(root())
            .output()
            .expect("git");
        assert_eq!(commit, String::from_utf8_lossy(&head.stdout).trim());
    }

    let reg = Registry::start();
    reg.seed(&[TAG]);
    let port = reg.addr.rsplit(':').next().expect("port");
    let by_ip = reg.repo();
    let by_name = format!("localhost:{port}/{REPO}");
    // What the development build plans, for comparison (per name: the provenance attached
    // to a patched image names its source, so the digests differ by repository name).
    let work = tempfile::tempdir().expect("tmp");
    let expected = |repo: &str| {
        let r = Tool::new("plan")
            .cwd(work.path())
            .backend("cuda")
            .repo(repo)
            .tag(TAG)
            .json()
            .run();
        assert_eq!(r.code, 0, "{}", r.stderr);
        let d = r.json()["images"][0]["patched_digest"].clone();
        assert!(d.is_string(), "{}", r.stdout);
        d
    };
    let expected = [
        (by_ip.clone(), expected(&by_ip)),
        (by_name.clone(), expected(&by_name)),
    ];

    // An empty environment: no HOME, no PATH, no locale; an IP literal and a name.
    for (repo, want) in &expected {
        let o = plan_bare(b, None, repo);
        assert!(o.code == 0, "env -i plan {repo}: {}", text(&o));
        assert_eq!(&outcome(&o)["patched_digest"], want, "{repo}");
    }

    // A bare root: the binary, the CA bundle and /etc/hosts; no libc, no NSS modules.
    let root_dir = bare_root(work.path(), &bin);
    if let Err(why) = chroot_works(&root_dir, "/runner-patch") {
        assert!(!required(), "chroot does not work here: {why}");
        eprintln!("SKIP (bare root): chroot does not work on this machine: {why}");
        return;
    }
    for (repo, want) in &expected {
        let o = plan_bare("/runner-patch", Some(&root_dir), repo);
        assert!(o.code == 0, "chroot plan {repo}: {}", text(&o));
        assert_eq!(&outcome(&o)["patched_digest"], want, "{repo}");
    }
    // A name only DNS could answer: the resolver runs (no nameserver here) and the run ends
    // with one clear error naming the registry, not a crash.
    let o = plan_bare(
        "/runner-patch",
        Some(&root_dir),
        "registry.runner-patch.invalid/gpustack/runner",
    );
    assert_eq!(o.code, 2, "{}", text(&o));
    let err = &o.stderr;
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("runner-patch: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].contains("registry.runner-patch.invalid")
            && errors[0].contains("failed to lookup address"),
        "{err}"
    );
}

/// The image `make image` built, or None (with a skip line).
fn tool_image() -> Option<String> {
    let name = format!("localhost/runner-patch:{}", env!("CARGO_PKG_VERSION"));
    let amd64 = format!("{name}-linux-amd64");
    let have = Command::new("skopeo")
        .args(["inspect", "--raw"])
        .arg(format!("containers-storage:{amd64}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if have {
        return Some(name);
    }
    assert!(!required(), "image {name} is missing: run make image");
    eprintln!("SKIP: image {name} is not built (make image; make test builds it)");
    None
}

fn run_ok(cmd: &mut Command) -> String {
    let o = Run::from(cmd.output().expect("spawn"));
    assert!(o.code == 0, "{cmd:?}: {}", text(&o));
    o.stdout.trim().to_owned()
}

/// Every file (not directory) under `dir`, relative.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).expect("prefix").display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn tool_image_holds_the_binary_and_ca_certificates_only_and_runs_plan_and_apply() {
    let Some(bin) = dist_bin() else { return };
    let Some(image) = tool_image() else { return };
    // The list's linux/amd64 image, by the tag `make image` gives it.
    let storage = format!("containers-storage:{image}-linux-amd64");

    // Labels and entrypoint, read with skopeo from the local container storage.
    let config: Value = serde_json::from_str(&run_ok(
        Command::new("skopeo").args(["inspect", "--config", &storage]),
    ))
    .expect("config json");
    let labels = &config["config"]["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(labels["org.opencontainers.image.source"]
        .as_str()
        .is_some_and(|s| s.starts_with("https://")));
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(revision.len(), 40, "{labels}");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/runner-patch"])
    );
    assert_eq!(config["config"]["User"], "65532:65532");
    // A manifest list, ready for more platforms.
    let list: Value = serde_json::from_str(&run_ok(
        Command::new("buildah").args(["manifest", "inspect", &image]),
    ))
    .expect("list json");
    let plats: Vec<String> = list["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["platform"]["os"].as_str().unwrap_or(""),
                m["platform"]["architecture"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert!(plats.contains(&"linux/amd64".to_owned()), "{plats:?}");

    // Its files: the dist binary and the CA bundle, nothing else.
    let ctr = run_ok(Command::new("buildah").args(["from", "--pull-never", &storage]));
    struct Rm(String);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = Command::new("buildah").args(["rm", &self.0]).output();
        }
    }
    let _rm = Rm(ctr.clone());
    let rootfs = PathBuf::from(run_ok(Command::new("buildah").args(["mount", &ctr])));
    assert_eq!(
        files_under(&rootfs),
        [
            "etc/ssl/certs/ca-certificates.crt",
            "usr/local/bin/runner-patch"
        ]
    );
    assert_eq!(
        std::fs::read(rootfs.join("usr/local/bin/runner-patch")).expect("read"),
        std::fs::read(&bin).expect("read")
    );

    let reg = Registry::start();
    reg.seed(&[TAG]);
    let repo = reg.repo();

    // The image's root as a runtime would run it (plus the /etc/hosts a runtime adds).
    std::fs::write(rootfs.join("etc/hosts"), "127.0.0.1 localhost\n").expect("hosts");
    match chroot_works(&rootfs, "/usr/local/bin/runner-patch") {
        Ok(()) => {
            let o = plan_bare("/usr/local/bin/runner-patch", Some(&rootfs), &repo);
            assert!(o.code == 0, "plan in the image's root: {}", text(&o));
            assert_eq!(outcome(&o)["outcome"], "patched");
        }
        Err(why) => {
            assert!(!required(), "chroot does not work here: {why}");
            eprintln!("SKIP (image root): chroot does not work on this machine: {why}");
        }
    }

    // podman: run it for real where podman can run containers.
    let probe = Command::new("podman")
        .args(["run", "--rm", "--network", "host", &image, "--version"])
        .output()
        .map(Run::from);
    // Only a failure of the container runtime itself (crun/runc/OCI errors: no container can
    // start here) is a skip; the image failing to run is a failure.
    let why = match &probe {
        Err(e) => Some(format!("podman: {e}")),
        Ok(o) if o.code != 0 => {
            let t = text(o);
            let runtime = ["crun:", "runc:", "OCI runtime", "OCI permission denied"];
            assert!(
                runtime.iter().any(|m| t.contains(m)),
                "the image did not run: {t}"
            );
            Some(t.lines().last().unwrap_or("").to_owned())
        }
        Ok(_) => None,
    };
    if let Some(why) = why {
        eprintln!(
            "SKIP (podman run): podman cannot run containers on this machine, so the image was \
             checked by its files and a chroot of its root only: {why}"
        );
        return;
    }
    let probe = probe.expect("probe");
    assert!(probe.stdout.contains(&revision), "{}", text(&probe));
    let work = tempfile::tempdir().expect("tmp");
    let mount = format!("{}:/work", work.path().display());
    let podman = |args: &[&str]| {
        Command::new("podman")
            .args([
                "run",
                "--rm",
                "--network",
                "host",
                "-v",
                &mount,
                "-w",
                "/work",
                "--user",
                "0",
            ])
            .arg(&image)
            .args(args)
            .output()
            .map(Run::from)
            .expect("podman run")
    };
    let plan = podman(&[
        "plan",
        "--backend",
        "cuda",
        "--repository",
        &repo,
        "--tag",
        TAG,
        "--json",
    ]);
    assert!(plan.code == 0, "{}", text(&plan));
    assert_eq!(outcome(&plan)["outcome"], "patched");
    let apply = podman(&[
        "apply",
        "--backend",
        "cuda",
        "--repository",
        &repo,
        "--tag",
        TAG,
        "--json",
    ]);
    assert!(apply.code == 0, "{}", text(&apply));
    let rec = outcome(&apply);
    assert_eq!(rec["patched_digest"], outcome(&plan)["patched_digest"]);
    assert_eq!(
        Some(served(rec["target"].as_str().expect("target")).as_str()),
        rec["patched_digest"].as_str()
    );
    assert!(work.path().join("runner-patch-manifest.json").is_file());
}
