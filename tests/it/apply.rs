//! `apply` on the fixture images of every backend, checked with clients this project did not write.

use serde_json::Value;

use crate::harness::*;

const MARKER: &str = "# runner-patch multiconnector-observe:";

fn image<'a>(map: &'a Value, source_tag: &str) -> &'a Value {
    map["images"]
        .as_array()
        .expect("images")
        .iter()
        .find(|i| {
            i["source"]
                .as_str()
                .is_some_and(|s| s.ends_with(&format!(":{source_tag}")))
        })
        .unwrap_or_else(|| panic!("no image {source_tag} in {map}"))
}

/// Checks one patched platform with skopeo + umoci + GNU tar and compares its config with the
/// original: only the appended diff_id, history entry and label may differ.
fn check_platform(
    reg: &Registry,
    tag: &str,
    arch: &str,
    plat: &Value,
    fixture: &Value,
    work: &std::path::Path,
) {
    let repo = reg.repo();
    let patched = plat["patched_digest"].as_str().expect("patched digest");
    // The map's digests are what the registry serves.
    assert_eq!(
        sha256_hex(&skopeo_raw(&format!("{repo}@{patched}"))),
        patched
    );
    let orig_manifest: Value = serde_json::from_slice(&skopeo_raw(&format!(
        "{repo}@{}",
        fixture["digest"].as_str().expect("d")
    )))
    .expect("json");
    let new_manifest: Value =
        serde_json::from_slice(&skopeo_raw(&format!("{repo}@{patched}"))).expect("json");
    assert_eq!(
        new_manifest["mediaType"], orig_manifest["mediaType"],
        "manifest keeps its media type family"
    );
    let (ol, nl) = (
        orig_manifest["layers"].as_array().expect("l"),
        new_manifest["layers"].as_array().expect("l"),
    );
    assert_eq!(nl.len(), ol.len() + 1);
    assert_eq!(
        &nl[..ol.len()],
        &ol[..],
        "every original layer descriptor is kept as it was"
    );
    let added = &nl[ol.len()];
    let family_layer = if orig_manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    {
        "application/vnd.oci.image.layer.v1.tar+gzip"
    } else {
        "application/vnd.docker.image.rootfs.diff.tar.gzip"
    };
    assert_eq!(added["mediaType"], family_layer);
    assert_eq!(added["digest"], plat["added_layer"]["digest"]);

    // Config: same keys and values, except the appended diff_id, history entry and label.
    let oc = skopeo_config(&format!(
        "{repo}@{}",
        fixture["digest"].as_str().expect("d")
    ));
    let nc = skopeo_config(&format!("{repo}@{patched}"));
    let mut expect = oc.clone();
    expect["rootfs"]["diff_ids"]
        .as_array_mut()
        .expect("diff_ids")
        .push(plat["added_layer"]["diff_id"].clone());
    let hist = nc["history"]
        .as_array()
        .expect("history")
        .last()
        .cloned()
        .expect("entry");
    assert!(hist["created_by"]
        .as_str()
        .expect("created_by")
        .contains("multiconnector-observe"));
    expect["history"]
        .as_array_mut()
        .expect("history")
        .push(hist);
    if expect["config"]["Labels"].is_null() {
        expect["config"]["Labels"] = serde_json::json!({});
    }
    expect["config"]["Labels"]["dev.runner-patch.patches"] = Value::from("multiconnector-observe");
    // The patched image names its original platform manifest itself (issue 9).
    expect["config"]["Labels"]["dev.runner-patch.original"] = fixture["digest"].clone();
    assert_eq!(
        nc, expect,
        "config differs beyond the appended diff_id/history/label"
    );
    assert!(
        oc.get("container_config").is_some()
            || oc.get("docker_version").is_some()
            || oc["config"].is_object()
    );

    // umoci checks every diff_id while unpacking; the container's view is the patched file.
    let (rootfs, layout) = unpack(&format!("{repo}:{tag}"), arch, &work.join(tag));
    let file = plat["file"].as_str().expect("file");
    let content = std::fs::read_to_string(rootfs.join(file.trim_start_matches('/')))
        .expect("patched file in rootfs");
    assert!(
        content.contains(MARKER),
        "unpacked file is not the patched one"
    );
    assert!(!content.contains("is not contained in the list of registered connectors"));
    let dir = std::path::Path::new(file).parent().expect("dir");
    let cache = rootfs
        .join(dir.strip_prefix("/").expect("abs"))
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
    assert!(stale.is_empty(), "stale bytecode still visible: {stale:?}");

    // GNU tar reads the new layer blob as a valid archive with the file and the whiteouts.
    let hex = added["digest"]
        .as_str()
        .expect("d")
        .trim_start_matches("sha256:");
    let listing = tar_list(&layout.join("blobs/sha256").join(hex));
    assert!(listing.contains(file.trim_start_matches('/')), "{listing}");
    assert!(listing.contains(".wh.multi_connector."), "{listing}");
}

#[test]
fn every_backend_is_patched_on_every_platform_and_independent_clients_agree() {
    let reg = Registry::start();
    let summary = reg.seed(&[
        "cuda12.9-vllm0.27.1",
        "rocm7.2-vllm0.25.1",
        "cann9.0-910b-vllm0.20.2",
    ]);
    let work = tempfile::tempdir().expect("tmp");
    for (backend, tag, version) in [
        ("cuda", "cuda12.9-vllm0.27.1", "0.27.1"),
        ("rocm", "rocm7.2-vllm0.25.1", "0.25.1"),
        ("cann", "cann9.0-910b-vllm0.20.2", "0.20.2"),
    ] {
        let run = Tool::new("apply")
            .cwd(work.path())
            .backend(backend)
            .repo(reg.repo())
            .tag(tag)
            .json()
            .digest_map(format!("{backend}.json"))
            .run();
        assert_eq!(run.code, 0, "{}", run.stderr);
        // stdout (--json) and the file written agree.
        let map = run.json();
        let file: Value = serde_json::from_slice(
            &std::fs::read(work.path().join(format!("{backend}.json"))).expect("map"),
        )
        .expect("json");
        assert_eq!(map["images"], file["images"]);
        assert_eq!(file["patch"], "multiconnector-observe");
        let img = image(&file, tag);
        let fx = &summary["images"][tag];
        assert_eq!(img["outcome"], "patched");
        assert_eq!(img["original_digest"], fx["digest"]);
        assert_eq!(
            img["target"], img["source"],
            "default target is the source tag"
        );
        let patched = img["patched_digest"].as_str().expect("patched");
        assert_eq!(
            sha256_hex(&skopeo_raw(&format!("{}:{tag}", reg.repo()))),
            patched,
            "the tag serves the patched digest"
        );
        let index: Value =
            serde_json::from_slice(&skopeo_raw(&format!("{}:{tag}", reg.repo()))).expect("json");
        assert_eq!(
            index["mediaType"], fx["media_type"],
            "index keeps its media type"
        );
        let plats = img["platforms"].as_array().expect("platforms");
        assert_eq!(plats.len(), fx["platforms"].as_object().expect("p").len());
        for (i, plat) in plats.iter().enumerate() {
            let name = plat["platform"].as_str().expect("platform");
            let key = name.split('/').take(2).collect::<Vec<_>>().join("/");
            let fxp = fx["platforms"]
                .as_object()
                .expect("p")
                .iter()
                .find(|(k, _)| k.starts_with(&key))
                .map(|(_, v)| v)
                .expect("fixture platform");
            assert_eq!(plat["outcome"], "patched", "{name}: {}", plat["reason"]);
            assert_eq!(plat["vllm_version"], version);
            assert_eq!(plat["file"], fxp["file"]);
            assert_eq!(plat["original_digest"], fxp["digest"]);
            assert_eq!(
                index["manifests"][i]["digest"], plat["patched_digest"],
                "index order and children"
            );
            assert_eq!(
                index["manifests"][i]["platform"]["architecture"],
                name.split('/').nth(1).expect("arch")
            );
            check_platform(
                &reg,
                tag,
                name.split('/').nth(1).expect("arch"),
                plat,
                fxp,
                work.path(),
            );
        }

        // A second apply finds the patch and writes nothing.
        let before = reg.storage();
        let again = Tool::new("apply")
            .cwd(work.path())
            .backend(backend)
            .repo(reg.repo())
            .tag(tag)
            .json()
            .digest_map(format!("{backend}-2.json"))
            .run();
        assert_eq!(again.code, 0, "{}", again.stderr);
        let img2 = image(&again.json(), tag).clone();
        assert_eq!(img2["outcome"], "already-patched");
        // The image names its originals itself (issue 9): every platform from its config
        // label, the index from its annotation where it has them (an OCI index; a Docker list
        // has no annotations, so there the map cannot learn it without the first map).
        let expect_top = if fx["media_type"] == "application/vnd.oci.image.index.v1+json" {
            fx["digest"].clone()
        } else {
            Value::from(patched)
        };
        assert_eq!(img2["original_digest"], expect_top);
        for (p1, p2) in plats
            .iter()
            .zip(img2["platforms"].as_array().expect("platforms"))
        {
            assert_eq!(p2["original_digest"], p1["original_digest"], "{p2}");
            assert_eq!(p2["patched_digest"], p1["patched_digest"], "{p2}");
        }
        assert_eq!(img2["patched_digest"], patched);
        assert_eq!(reg.storage(), before, "second apply wrote to the registry");
    }
}

#[test]
fn attestations_are_dropped_single_manifests_patched_and_upper_copies_win() {
    let reg = Registry::start();
    let summary = reg.seed(&[
        "cuda12.9-vllm0.25.1",
        "cuda12.8-vllm0.27.1",
        "cuda12.9-vllm0.27.1-upper",
        "cuda13.0-vllm0.30.0",
        "cuda13.0-vllm0.33.0",
    ]);
    let work = tempfile::tempdir().expect("tmp");
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tags([
            "cuda12.9-vllm0.25.1",
            "cuda12.8-vllm0.27.1",
            "cuda12.9-vllm0.27.1-upper",
            "cuda13.0-vllm0.30.0",
            "cuda13.0-vllm0.33.0",
        ])
        .json()
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let map = run.json();

    // Attestation child: left out, and said so.
    let att = image(&map, "cuda12.9-vllm0.25.1");
    assert_eq!(att["outcome"], "patched");
    assert_eq!(
        att["dropped_attestations"]
            .as_array()
            .expect("dropped")
            .len(),
        1
    );
    assert!(
        run.stderr.contains("attestation manifest"),
        "{}",
        run.stderr
    );
    let index: Value =
        serde_json::from_slice(&skopeo_raw(&format!("{}:cuda12.9-vllm0.25.1", reg.repo())))
            .expect("json");
    let children = index["manifests"].as_array().expect("children");
    assert_eq!(children.len(), 2);
    assert!(children.iter().all(|c| c["platform"]["os"] == "linux"));

    // A tag on a single manifest becomes a single patched manifest.
    let single = image(&map, "cuda12.8-vllm0.27.1");
    assert_eq!(single["outcome"], "patched");
    let m: Value =
        serde_json::from_slice(&skopeo_raw(&format!("{}:cuda12.8-vllm0.27.1", reg.repo())))
            .expect("json");
    assert_eq!(
        m["mediaType"],
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    assert_eq!(
        single["patched_digest"],
        single["platforms"][0]["patched_digest"]
    );

    // The copy in the upper layer is the one patched; the lower one of unknown shape is ignored.
    let upper = image(&map, "cuda12.9-vllm0.27.1-upper");
    assert_eq!(upper["outcome"], "patched", "{}", upper["reason"]);
    let (rootfs, _) = unpack(
        &format!("{}:cuda12.9-vllm0.27.1-upper", reg.repo()),
        "amd64",
        work.path(),
    );
    let f = upper["platforms"][0]["file"]
        .as_str()
        .expect("file")
        .trim_start_matches('/');
    assert!(std::fs::read_to_string(rootfs.join(f))
        .expect("file")
        .contains("runner-patch multiconnector-observe"));
    assert!(!rootfs.join("opt/legacy").exists());

    // 0.30 shape keeps its plain argument; 0.33 is fixed upstream.
    let (rootfs, _) = unpack(
        &format!("{}:cuda13.0-vllm0.30.0", reg.repo()),
        "amd64",
        &work.path().join("p"),
    );
    let f = image(&map, "cuda13.0-vllm0.30.0")["platforms"][0]["file"]
        .as_str()
        .expect("file")
        .trim_start_matches('/')
        .to_owned();
    let text = std::fs::read_to_string(rootfs.join(f)).expect("file");
    assert!(text.contains("prom_metrics.observe(stats_data, engine_idx)"));
    assert!(!text.contains("stats_data[\"data\"]"));
    let fixed = image(&map, "cuda13.0-vllm0.33.0");
    assert_eq!(fixed["outcome"], "not-affected");
    assert_eq!(fixed["patched_digest"], Value::Null);
    assert_eq!(
        sha256_hex(&skopeo_raw(&format!("{}:cuda13.0-vllm0.33.0", reg.repo()))),
        summary["images"]["cuda13.0-vllm0.33.0"]["digest"]
            .as_str()
            .expect("d")
    );
}

#[test]
fn target_repository_and_suffix_leave_the_source_alone_and_reuse_layers() {
    let reg = Registry::start();
    let summary = reg.seed(&["cuda12.9-vllm0.27.1"]);
    let work = tempfile::tempdir().expect("tmp");
    let target = format!("{}/mirror/runner", reg.addr);
    let patch_to_target = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tag("cuda12.9-vllm0.27.1")
        .json()
        .target_repo(&target)
        .args(["--tag-suffix", "-patched"]);
    let run = patch_to_target.run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let img = image(&run.json(), "cuda12.9-vllm0.27.1").clone();
    assert_eq!(
        img["target"],
        format!("{target}:cuda12.9-vllm0.27.1-patched")
    );
    let orig = summary["images"]["cuda12.9-vllm0.27.1"]["digest"]
        .as_str()
        .expect("d");
    assert_eq!(
        sha256_hex(&skopeo_raw(&format!("{}:cuda12.9-vllm0.27.1", reg.repo()))),
        orig,
        "source tag untouched"
    );
    assert_eq!(
        sha256_hex(&skopeo_raw(&format!(
            "{target}:cuda12.9-vllm0.27.1-patched"
        ))),
        img["patched_digest"].as_str().expect("p")
    );
    // Every blob is there: skopeo + umoci can pull and unpack the target.
    let (rootfs, _) = unpack(
        &format!("{target}:cuda12.9-vllm0.27.1-patched"),
        "arm64",
        work.path(),
    );
    let f = img["platforms"][1]["file"]
        .as_str()
        .expect("file")
        .trim_start_matches('/');
    assert!(std::fs::read_to_string(rootfs.join(f))
        .expect("file")
        .contains("runner-patch multiconnector-observe"));

    // Same command again: same digests, nothing new stored.
    let before = reg.storage();
    let again = patch_to_target.run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(
        image(&again.json(), "cuda12.9-vllm0.27.1")["patched_digest"],
        img["patched_digest"]
    );
    assert_eq!(reg.storage(), before, "re-run wrote to the registry");
}

#[test]
fn dry_run_pushes_nothing_and_writes_no_map() {
    let reg = Registry::start();
    reg.seed(&["rocm7.2-vllm0.25.1"]);
    let work = tempfile::tempdir().expect("tmp");
    let before = reg.storage();
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("rocm")
        .repo(reg.repo())
        .tag("rocm7.2-vllm0.25.1")
        .json()
        .arg("--dry-run")
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        image(&run.json(), "rocm7.2-vllm0.25.1")["outcome"],
        "patched"
    );
    assert_eq!(reg.storage(), before);
    assert!(!work.path().join("runner-patch-manifest.json").exists());
}

#[test]
fn an_already_patched_source_is_published_under_the_target_name() {
    let reg = Registry::start();
    reg.seed(&["cuda12.8-vllm0.27.1"]);
    let work = tempfile::tempdir().expect("tmp");
    let apply = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tag("cuda12.8-vllm0.27.1")
        .json();
    let first = apply.run();
    assert_eq!(first.code, 0, "{}", first.stderr);
    let patched = image(&first.json(), "cuda12.8-vllm0.27.1")["patched_digest"].clone();
    let target = format!("{}/mirror/runner", reg.addr);
    let again = apply
        .target_repo(&target)
        .args(["--tag-suffix", "-p2"])
        .run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    let img = image(&again.json(), "cuda12.8-vllm0.27.1").clone();
    assert_eq!(img["outcome"], "already-patched");
    assert_eq!(img["patched_digest"], patched);
    assert_eq!(
        served(&format!("{target}:cuda12.8-vllm0.27.1-p2")),
        patched.as_str().expect("digest")
    );
    let (rootfs, _) = unpack(
        &format!("{target}:cuda12.8-vllm0.27.1-p2"),
        "amd64",
        work.path(),
    );
    let f = img["platforms"][0]["file"]
        .as_str()
        .expect("file")
        .trim_start_matches('/');
    assert!(std::fs::read_to_string(rootfs.join(f))
        .expect("file")
        .contains("runner-patch multiconnector-observe"));
}
