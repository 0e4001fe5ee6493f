//! OCI layout directories (`oci:PATH`) as source and target, and zstd layers (issue 11). Layouts
//! are made and read back with skopeo and umoci; digests are compared with what skopeo serves
//! from the registry and with the files in the layout, never with this tool's own reading.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::*;

const MARKER: &str = "# runner-patch multiconnector-observe:";
const BACKENDS: [(&str, &str); 3] = [
    ("cuda", "cuda12.9-vllm0.27.1"),
    ("rocm", "rocm7.2-vllm0.25.1"),
    ("cann", "cann9.0-910b-vllm0.20.2"),
];

fn oci(dir: &Path) -> String {
    format!("oci:{}", dir.display())
}

/// `skopeo copy --all` of a registry tag into a layout (skopeo writes OCI types only).
fn to_layout(reference: &str, dir: &Path, tag: &str, extra: &[&str]) {
    let dest = format!("{}:{tag}", oci(dir));
    let src = format!("docker://{reference}");
    let mut args = vec!["copy", "-q", "--all", "--src-tls-verify=false"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[src.as_str(), dest.as_str()]);
    run_tool("skopeo", &args);
}

fn blob(dir: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").expect("sha256");
    std::fs::read(dir.join("blobs/sha256").join(hex)).expect("blob in the layout")
}

fn json_blob(dir: &Path, digest: &str) -> Value {
    serde_json::from_slice(&blob(dir, digest)).expect("json blob")
}

/// `index.json`'s entry for a tag, read from the file.
fn entry(dir: &Path, tag: &str) -> Option<Value> {
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).expect("index.json"))
            .expect("json");
    index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .find(|e| e["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .cloned()
}

/// Every file in `blobs/sha256` holds the bytes its name says, and every blob `index.json`
/// names, down to each child manifest's config and layers, is there.
fn assert_whole(dir: &Path) {
    for e in std::fs::read_dir(dir.join("blobs/sha256")).expect("blobs") {
        let e = e.expect("entry");
        let name = e.file_name().to_string_lossy().into_owned();
        let bytes = std::fs::read(e.path()).expect("read blob");
        assert_eq!(sha256_hex(&bytes), format!("sha256:{name}"), "blob {name}");
    }
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).expect("index.json"))
            .expect("index.json is JSON");
    let mut stack: Vec<Value> = index["manifests"].as_array().expect("manifests").clone();
    while let Some(d) = stack.pop() {
        let digest = d["digest"].as_str().expect("digest");
        let path = dir
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"));
        assert!(
            path.is_file(),
            "index.json reaches {digest}, which is missing"
        );
        let media = d["mediaType"].as_str().unwrap_or_default();
        if media.contains("manifest") || media.contains("index") {
            let doc = json_blob(dir, digest);
            stack.extend(doc["manifests"].as_array().into_iter().flatten().cloned());
            stack.extend(doc.get("config").cloned());
            stack.extend(doc["layers"].as_array().into_iter().flatten().cloned());
        }
    }
}

/// One platform of a layout's tag unpacked by umoci (after skopeo picks the platform, in gzip
/// when `gzip`); returns the rootfs.
fn unpack_from(source: &str, arch: &str, into: &Path, gzip: bool) -> PathBuf {
    std::fs::create_dir_all(into).expect("mkdir");
    let single = into.join(format!("single-{arch}"));
    let bundle = into.join(format!("bundle-{arch}"));
    let dest = format!("{}:t", oci(&single));
    let mut args = vec![
        "copy",
        "-q",
        "--src-tls-verify=false",
        "--override-os",
        "linux",
        "--override-arch",
        arch,
    ];
    if gzip {
        args.extend_from_slice(&["--dest-compress", "--dest-compress-format", "gzip"]);
    }
    args.extend_from_slice(&[source, dest.as_str()]);
    run_tool("skopeo", &args);
    let image = format!("{}:t", single.display());
    let b = bundle.display().to_string();
    run_tool("umoci", &["unpack", "--rootless", "--image", &image, &b]);
    bundle.join("rootfs")
}

/// The file the container sees, checked patched and without stale bytecode beside it.
fn patched_file(rootfs: &Path, file: &str) -> String {
    let rel = file.trim_start_matches('/');
    let content = std::fs::read_to_string(rootfs.join(rel)).expect("file in rootfs");
    assert!(content.contains(MARKER), "{file} is not the patched one");
    let cache = rootfs
        .join(Path::new(rel).parent().expect("dir"))
        .join("__pycache__");
    let stale: Vec<_> = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("multi_connector.")
        })
        .collect();
    assert!(stale.is_empty(), "stale bytecode visible: {stale:?}");
    content
}

fn arch_of(plat: &Value) -> String {
    plat["platform"]
        .as_str()
        .expect("platform")
        .split('/')
        .nth(1)
        .expect("arch")
        .to_owned()
}

/// `apply --json` of one tag, which must succeed.
fn apply(work: &Path, backend: &str, repo: &str, tag: &str) -> Tool {
    Tool::new("apply")
        .cwd(work)
        .backend(backend)
        .repo(repo)
        .tag(tag)
        .json()
}

/// The image record of a successful `apply` run.
fn applied(tool: Tool) -> Value {
    tool.ok_json()["images"][0].clone()
}

#[test]
fn every_backend_in_a_layout_plans_applies_verifies_rolls_back_and_goes_to_a_registry() {
    let reg = Registry::start();
    let summary = reg.seed(&BACKENDS.map(|(_, t)| t));
    let work = tempfile::tempdir().expect("tmp");
    let w = work.path();
    let lay = w.join("layout");
    for (_, tag) in BACKENDS {
        to_layout(&format!("{}:{tag}", reg.repo()), &lay, tag, &[]);
    }
    let repo = oci(&lay);
    for (backend, tag) in BACKENDS {
        let original = entry(&lay, tag).expect("tag in layout")["digest"].clone();
        // Tag discovery works on index.json's ref.names (provenance's sha256-<hex> names and
        // the other backends' tags are not this backend's).
        let found = Tool::new("plan")
            .cwd(w)
            .backend(backend)
            .repo(&repo)
            .json()
            .ok_json();
        let sources: Vec<_> = found["images"]
            .as_array()
            .expect("images")
            .iter()
            .map(|i| i["source"].clone())
            .collect();
        assert_eq!(sources, vec![json!(format!("{repo}:{tag}"))]);
        // plan reads the layout and writes nothing.
        let before = std::fs::read(lay.join("index.json")).expect("index");
        let plan = Tool::new("plan")
            .cwd(w)
            .backend(backend)
            .repo(&repo)
            .tag(tag)
            .json()
            .ok_json();
        assert_eq!(plan["images"][0]["outcome"], "patched", "{plan:#}");
        assert_eq!(
            std::fs::read(lay.join("index.json")).expect("index"),
            before
        );

        // layout -> registry, from the unpatched layout.
        let up_repo = format!("{}/fromlayout", reg.addr);
        let up = applied(
            apply(w, backend, &repo, tag)
                .target_repo(&up_repo)
                .digest_map(format!("{backend}-up.json")),
        );
        assert_eq!(up["outcome"], "patched");
        assert_eq!(up["source"], format!("{repo}:{tag}"));
        assert_eq!(up["original_digest"], original);
        assert_eq!(
            up["patched_digest"].as_str(),
            Some(served(&format!("{up_repo}:{tag}")).as_str())
        );

        // In place.
        let map_path = format!("{backend}.json");
        let img = applied(apply(w, backend, &repo, tag).digest_map(&map_path));
        assert_eq!(img["outcome"], "patched", "{img:#}");
        assert_eq!(
            (&img["source"], &img["target"]),
            (
                &json!(format!("{repo}:{tag}")),
                &json!(format!("{repo}:{tag}"))
            )
        );
        assert_eq!(img["original_digest"], original);
        let now = entry(&lay, tag).expect("tag");
        assert_eq!(now["digest"], img["patched_digest"]);
        assert_eq!(now["mediaType"], "application/vnd.oci.image.index.v1+json");
        assert_whole(&lay);
        // The same source read from the same name: the same patched digests as layout -> registry.
        assert_eq!(img["patched_digest"], up["patched_digest"]);
        for (a, b) in img["platforms"]
            .as_array()
            .expect("p")
            .iter()
            .zip(up["platforms"].as_array().expect("p"))
        {
            assert_eq!(a["patched_digest"], b["patched_digest"]);
        }

        let v = Tool::new("verify")
            .cwd(w)
            .arg(format!("{repo}:{tag}"))
            .digest_map(&map_path)
            .run();
        assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);

        // umoci sees the patched file, the same bytes the registry path gives.
        let fx = &summary["images"][tag];
        let reg_img =
            applied(apply(w, backend, &reg.repo(), tag).digest_map(format!("{backend}-reg.json")));
        assert_eq!(reg_img["outcome"], "patched");
        for plat in img["platforms"].as_array().expect("platforms") {
            assert_eq!(plat["outcome"], "patched", "{}", plat["reason"]);
            let arch = arch_of(plat);
            let file = plat["file"].as_str().expect("file");
            let here = w.join(format!("{tag}-layout"));
            let from_layout = patched_file(
                &unpack_from(&format!("{repo}:{tag}"), &arch, &here, false),
                file,
            );
            let (rootfs, _) = unpack(
                &format!("{}:{tag}", reg.repo()),
                &arch,
                &w.join(format!("{tag}-reg")),
            );
            assert_eq!(from_layout, patched_file(&rootfs, file), "{tag} {arch}");
            assert!(fx["platforms"]
                .as_object()
                .expect("p")
                .values()
                .any(|p| p["file"] == file));
        }

        // rollback moves the layout's tag back.
        let rb = Tool::new("rollback").cwd(w).digest_map(&map_path).run();
        assert_eq!(rb.code, 0, "{}{}", rb.stdout, rb.stderr);
        assert_eq!(entry(&lay, tag).expect("tag")["digest"], original);
        assert_whole(&lay);
    }
}

#[test]
fn registry_to_layout_keeps_docker_types_and_equals_the_registry_patch() {
    let reg = Registry::start();
    let tags = ["cuda12.9-vllm0.27.1", "cann9.0-910b-vllm0.20.2"];
    let summary = reg.seed(&tags);
    let work = tempfile::tempdir().expect("tmp");
    let w = work.path();
    // A target layout that does not exist yet is created.
    let lay = w.join("new/layout");
    let repo = oci(&lay);
    for (backend, tag) in [("cuda", tags[0]), ("cann", tags[1])] {
        let fx = &summary["images"][tag];
        let down = applied(
            apply(w, backend, &reg.repo(), tag)
                .target_repo(&repo)
                .digest_map("down.json"),
        );
        assert_eq!(down["outcome"], "patched", "{down:#}");
        assert_eq!(down["target"], format!("{repo}:{tag}"));
        let e = entry(&lay, tag).expect("tag in the new layout");
        assert_eq!(e["digest"], down["patched_digest"]);
        // The entry carries the manifest's own media type: a Docker list stays a Docker list.
        assert_eq!(e["mediaType"], fx["media_type"]);
        assert_eq!(
            json_blob(&lay, e["digest"].as_str().expect("d"))["mediaType"],
            fx["media_type"]
        );
        assert_whole(&lay);
        let v = Tool::new("verify")
            .cwd(w)
            .arg(format!("{repo}:{tag}"))
            .digest_map("down.json")
            .run();
        assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);

        // The same image patched registry -> registry: the same digests (same source name).
        let other = format!("{}/inregistry", reg.addr);
        let inreg = applied(
            apply(w, backend, &reg.repo(), tag)
                .target_repo(&other)
                .digest_map("inreg.json"),
        );
        assert_eq!(inreg["patched_digest"], down["patched_digest"]);
        for (a, b) in inreg["platforms"]
            .as_array()
            .expect("p")
            .iter()
            .zip(down["platforms"].as_array().expect("p"))
        {
            assert_eq!(
                a["patched_digest"], b["patched_digest"],
                "{}",
                a["platform"]
            );
        }

        // Back to a registry: the digests the layout holds are the ones served (family kept).
        let back = format!("{}/back", reg.addr);
        let up = applied(
            apply(w, backend, &repo, tag)
                .target_repo(&back)
                .digest_map("up.json"),
        );
        assert_eq!(up["outcome"], "already-patched", "{up:#}");
        let raw = skopeo_raw(&format!("{back}:{tag}"));
        assert_eq!(
            Some(sha256_hex(&raw).as_str()),
            down["patched_digest"].as_str()
        );
        let served_doc: Value = serde_json::from_slice(&raw).expect("json");
        assert_eq!(served_doc["mediaType"], fx["media_type"]);
        for plat in down["platforms"].as_array().expect("platforms") {
            let arch = arch_of(plat);
            let file = plat["file"].as_str().expect("file");
            let (a, _) = unpack(
                &format!("{back}:{tag}"),
                &arch,
                &w.join(format!("{tag}-back")),
            );
            let (b, _) = unpack(
                &format!("{other}:{tag}"),
                &arch,
                &w.join(format!("{tag}-other")),
            );
            assert_eq!(patched_file(&a, file), patched_file(&b, file));
        }
    }
}

/// Waits until the fault proxy signals that it holds the request.
fn wait_for(child: &mut std::process::Child, signal: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !signal.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("runner-patch ended ({status}) before the held request");
        }
        assert!(Instant::now() < deadline, "the held request never came");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_run_killed_while_copying_into_a_layout_leaves_it_whole() {
    let reg = Registry::start();
    let tag = "cuda12.9-vllm0.27.1";
    let other = "cann9.0-910b-vllm0.20.2";
    reg.seed(&[tag, other]);
    let work = tempfile::tempdir().expect("tmp");
    let w = work.path();
    let lay = w.join("layout");
    to_layout(&format!("{}:{other}", reg.repo()), &lay, other, &[]);
    let before_other = entry(&lay, other).expect("other tag");
    let plan_file = w.join("faults.json");
    std::fs::write(&plan_file, "[]").expect("plan");
    let proxy = Daemon::start(
        "fault_proxy",
        &[
            "--upstream",
            &reg.addr,
            "--plan",
            plan_file.to_str().expect("utf8"),
            "--log",
            w.join("proxy.log").to_str().expect("utf8"),
        ],
    );
    let via = format!("{}/{REPO}", proxy.addr());
    let into_layout = apply(w, "cuda", &via, tag)
        .target_repo(oci(&lay))
        .digest_map("map.json");
    // A plan first fills the scan cache, so every layer GET of the apply is a copy into the layout.
    let plan = Tool::new("plan")
        .cwd(w)
        .backend("cuda")
        .repo(&via)
        .tag(tag)
        .run();
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let blobs = || {
        std::fs::read_dir(lay.join("blobs/sha256"))
            .expect("blobs")
            .count()
    };
    let blobs_before = blobs();
    let signal = w.join("held");
    let rules = json!([{
        "match": {"method": "GET", "path_regex": "/blobs/sha256:", "nth": [4]},
        "fault": {"kind": "hold", "signal": signal.to_str().expect("utf8"), "after_upstream": false},
    }]);
    std::fs::write(w.join("faults.tmp"), rules.to_string()).expect("rules");
    std::fs::rename(w.join("faults.tmp"), &plan_file).expect("rules");
    let mut child = into_layout
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    wait_for(&mut child, &signal);
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    // Killed mid-copy: some blobs arrived, the tag did not.
    assert!(
        blobs() > blobs_before,
        "the kill did not land during the copy"
    );
    assert!(entry(&lay, tag).is_none());
    assert_eq!(entry(&lay, other), Some(before_other.clone()));
    assert_whole(&lay);
    // Other tools still read the layout; a re-run completes it.
    run_tool(
        "skopeo",
        &["inspect", "--raw", &format!("{}:{other}", oci(&lay))],
    );
    std::fs::write(&plan_file, "[]").expect("plan");
    let again = into_layout.run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    let img = &again.json()["images"][0];
    assert_eq!(
        entry(&lay, tag).expect("tag")["digest"],
        img["patched_digest"]
    );
    assert_whole(&lay);
    let leftovers: Vec<_> = std::fs::read_dir(&lay)
        .expect("layout")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    drop(proxy);
}

#[test]
fn zstd_images_are_patched_in_a_registry_and_in_a_layout() {
    let reg = Registry::start();
    let tag = "cuda12.9-vllm0.27.1";
    reg.seed(&[tag]);
    let work = tempfile::tempdir().expect("tmp");
    let w = work.path();
    let zl = w.join("zstd");
    to_layout(
        &format!("{}:{tag}", reg.repo()),
        &zl,
        tag,
        &["--dest-compress", "--dest-compress-format", "zstd"],
    );
    let top = json_blob(
        &zl,
        entry(&zl, tag).expect("tag")["digest"].as_str().expect("d"),
    );
    for child in top["manifests"].as_array().expect("children") {
        let m = json_blob(&zl, child["digest"].as_str().expect("d"));
        for l in m["layers"].as_array().expect("layers") {
            assert_eq!(
                l["mediaType"],
                "application/vnd.oci.image.layer.v1.tar+zstd"
            );
        }
    }
    // Into the registry as it is (zstd layers), then patched there, every platform.
    let zrepo = format!("{}/zstd/runner", reg.addr);
    run_tool(
        "skopeo",
        &[
            "copy",
            "-q",
            "--all",
            "--dest-tls-verify=false",
            &format!("{}:{tag}", oci(&zl)),
            &format!("docker://{zrepo}:{tag}"),
        ],
    );
    // The scan cache holds for zstd layers (keyed by the compressed digest): after a plan, the
    // apply fetches none of them again (the registry's access log).
    let mut zstd_layers = Vec::new();
    for child in top["manifests"].as_array().expect("children") {
        let m = json_blob(&zl, child["digest"].as_str().expect("d"));
        for l in m["layers"].as_array().expect("layers") {
            zstd_layers.push(l["digest"].as_str().expect("d").to_owned());
        }
    }
    let fetched = || {
        let log = reg.log();
        zstd_layers
            .iter()
            .map(|d| {
                log.matches(&format!("\"GET /v2/zstd/runner/blobs/{d} "))
                    .count()
            })
            .sum::<usize>()
    };
    let plan = Tool::new("plan")
        .cwd(w)
        .backend("cuda")
        .repo(&zrepo)
        .tag(tag)
        .run();
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let after_plan = fetched();
    assert!(after_plan > 0, "the plan read no zstd layer");
    let img = applied(apply(w, "cuda", &zrepo, tag).digest_map("zstd.json"));
    assert_eq!(img["outcome"], "patched", "{img:#}");
    assert_eq!(fetched(), after_plan, "the apply read zstd layers again");
    let gz = applied(apply(w, "cuda", &reg.repo(), tag).digest_map("gzip.json"));
    let v = Tool::new("verify")
        .cwd(w)
        .arg(format!("{zrepo}:{tag}"))
        .digest_map("zstd.json")
        .run();
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);
    let plats = img["platforms"].as_array().expect("platforms");
    assert_eq!(plats.len(), 2);
    for plat in plats {
        assert_eq!(plat["outcome"], "patched", "{}", plat["reason"]);
        // The new layer stays gzip.
        assert_eq!(
            plat["added_layer"]["media_type"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let arch = arch_of(plat);
        let file = plat["file"].as_str().expect("file");
        let z = unpack_from(
            &format!("docker://{zrepo}:{tag}"),
            &arch,
            &w.join("z"),
            true,
        );
        let (g, _) = unpack(&format!("{}:{tag}", reg.repo()), &arch, &w.join("g"));
        assert_eq!(patched_file(&z, file), patched_file(&g, file));
    }
    assert_eq!(gz["outcome"], "patched");

    // In a layout, in place; zstd:chunked (its table of contents in a skippable frame) too.
    let zc = w.join("chunked");
    // From the original (the registry's tag is patched by now).
    let original = gz["original_digest"].as_str().expect("original");
    to_layout(
        &format!("{}@{original}", reg.repo()),
        &zc,
        tag,
        &["--dest-compress", "--dest-compress-format", "zstd:chunked"],
    );
    let top = json_blob(
        &zc,
        entry(&zc, tag).expect("tag")["digest"].as_str().expect("d"),
    );
    let m = json_blob(&zc, top["manifests"][0]["digest"].as_str().expect("d"));
    assert!(
        m["layers"][0]["annotations"]["io.containers.zstd-chunked.manifest-position"].is_string(),
        "{m:#}"
    );
    for dir in [&zl, &zc] {
        let r = oci(dir);
        let img = applied(apply(w, "cuda", &r, tag));
        let plats = img["platforms"].as_array().expect("p");
        assert_eq!(plats.len(), 2);
        for plat in plats {
            assert_eq!(plat["outcome"], "patched", "{}", plat["reason"]);
        }
        assert_whole(dir);
        if dir == &zc {
            // skopeo 1.9's zstd:chunked layers decompress to a tar other than the config's
            // diff_ids say (umoci refuses the unpatched image too), so no unpack there.
            continue;
        }
        let into = w.join(format!(
            "u-{}",
            dir.file_name().expect("name").to_string_lossy()
        ));
        let rootfs = unpack_from(&format!("{r}:{tag}"), "arm64", &into, true);
        patched_file(&rootfs, plats[1]["file"].as_str().expect("file"));
    }
}

#[test]
fn unknown_transports_and_a_locked_layout_are_refused_and_nothing_is_touched() {
    let reg = Registry::start();
    let tag = "rocm7.2-vllm0.25.1";
    reg.seed(&[tag]);
    let work = tempfile::tempdir().expect("tmp");
    let w = work.path();
    let before = reg.storage();
    let x = w.join("x");
    for bad in [
        format!("oci-archive:{}", x.display()),
        format!("dir:{}", x.display()),
        format!("docker-archive:{}", x.display()),
        format!("containers-storage:{}", x.display()),
        format!("ocidir://{}", x.display()),
        format!("oci-layout://{}", x.display()),
    ] {
        let apply = Tool::new("apply").cwd(w).backend("rocm").tag(tag);
        for tool in [
            apply.clone().repo(&bad),
            apply
                .clone()
                .repo(reg.repo())
                .target_repo(&bad)
                .digest_map("m.json"),
        ] {
            let run = tool.run();
            assert_eq!(run.code, 2, "{bad}: {}", run.stderr);
            assert!(
                run.stderr.contains("transport") && run.stderr.contains("oci:PATH"),
                "{}",
                run.stderr
            );
            assert_eq!(
                run.stderr.trim().lines().count(),
                1,
                "one sentence: {}",
                run.stderr
            );
        }
        let run = Tool::new("verify").cwd(w).arg(format!("{bad}:{tag}")).run();
        assert_eq!(run.code, 2, "{bad}: {}", run.stderr);
        assert!(!x.exists(), "{bad} created {}", x.display());
    }
    assert_eq!(reg.storage(), before);
    assert!(!w.join("m.json").exists());

    // One writer per layout: a second is refused while the first holds the lock.
    let lay = w.join("layout");
    to_layout(&format!("{}:{tag}", reg.repo()), &lay, tag, &[]);
    let index = std::fs::read(lay.join("index.json")).expect("index");
    let held = std::fs::File::open(lay.join("oci-layout")).expect("oci-layout");
    held.try_lock().expect("lock");
    let in_place = Tool::new("apply")
        .cwd(w)
        .backend("rocm")
        .repo(oci(&lay))
        .tag(tag);
    let run = in_place.run();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("another run is writing"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read(lay.join("index.json")).expect("index"), index);
    held.unlock().expect("unlock");
    let run = in_place.run();
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// A layout on a full disk, filled at every point of a copy (tmpfs sizes from a few blobs to
/// all but the last write): the run either completes or stops with the disk's error, and what
/// is on disk is always a whole layout, with the tag only when the run completed. (A write that
/// fails in the background of an async file must never pass for a stored blob or index.)
#[test]
fn a_full_disk_under_a_layout_is_an_error_and_leaves_it_whole() {
    let reg = Registry::start();
    reg.seed(&["cuda12.9-vllm0.27.1"]);
    let work = tempfile::tempdir().expect("tmp");
    let tag = "cuda12.9-vllm0.27.1";
    let mut failed = 0;
    for kib in (96..=512).step_by(16) {
        let disk = work.path().join(format!("disk-{kib}"));
        let Some(_unmount) = small_tmpfs(&disk, &format!("{kib}k")) else {
            eprintln!(
                "SKIPPED a_full_disk_under_a_layout: cannot mount a small tmpfs here (needs root)"
            );
            return;
        };
        let layout = disk.join("layout");
        let run = Tool::new("apply")
            .cwd(work.path())
            .backend("cuda")
            .repo(reg.repo())
            .tag(tag)
            .target_repo(oci(&layout))
            .digest_map(work.path().join(format!("map-{kib}.json")))
            .run();
        match run.code {
            0 => {
                assert_whole(&layout);
                assert!(
                    entry(&layout, tag).is_some(),
                    "{kib} KiB: completed but untagged"
                );
            }
            2 => {
                failed += 1;
                assert!(
                    run.stderr.contains("No space left on device"),
                    "{kib} KiB: the disk's error is named: {}",
                    run.stderr
                );
                if layout.join("index.json").exists() {
                    assert_whole(&layout);
                    assert!(
                        entry(&layout, tag).is_none(),
                        "{kib} KiB: the tag was written"
                    );
                }
            }
            other => panic!("{kib} KiB: exit {other}: {}", run.stderr),
        }
    }
    assert!(failed > 0, "no size was small enough to fill the disk");
}
