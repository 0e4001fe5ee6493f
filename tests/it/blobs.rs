//! Big layers (issue 18, "Streams"): a patch whose layer is tens of MB is spooled to an unnamed
//! temporary file in `TMPDIR` rather than built in memory, uploaded from that file once for the
//! platforms that share it, into a registry (read back by skopeo and umoci) and into an OCI
//! layout (its blob file unpacked by GNU tar), byte for byte. Nothing is left in `TMPDIR`; one that cannot be written is
//! named and nothing is pushed.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::harness::{run_tool, sha256_hex, tar_list, unpack, Registry, Tool};

const TAG: &str = "cuda12.9-vllm0.27.1";
/// Three files of 15 MiB: the layer is about 30 MB compressed, well past what stays in memory.
const FILES: u64 = 3;
const SIZE: usize = 15 << 20;

/// Bytes like a shared library's: fresh pseudo-random words between repeated instruction runs
/// (gzip takes them to about two thirds).
fn binary(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x % 5 < 3 {
            out.extend_from_slice(&x.to_le_bytes());
        } else {
            out.extend_from_slice(b"\x48\x89\xe5\x41\x57\x41\x56\x53\x48\x83\xec\x28");
        }
    }
    out.truncate(len);
    out
}

/// A `files` patch placing `FILES` big libraries; returns its folder and each path with the
/// sha256 of its bytes.
fn big_patch(dir: &Path) -> (PathBuf, Vec<(String, String)>) {
    let folder = dir.join("big");
    std::fs::create_dir_all(&folder).expect("mkdir");
    let mut toml = String::from("id = \"big-libs\"\nkind = \"files\"\ntitle = \"big libraries\"\n");
    let mut files = Vec::new();
    for i in 0..FILES {
        let name = format!("libbig{i}.so");
        let bytes = binary(SIZE, i + 1);
        std::fs::write(folder.join(&name), &bytes).expect("write");
        let path = format!("/opt/big/lib/{name}");
        toml.push_str(&format!(
            "[[files]]\npath = \"{path}\"\nsource = \"{name}\"\nmode = 0o755\n"
        ));
        files.push((path, sha256_hex(&bytes)));
    }
    std::fs::write(folder.join("patch.toml"), toml).expect("patch.toml");
    (folder, files)
}

/// The files, as the unpacked rootfs holds them, each with the bytes the patch placed.
fn assert_placed(rootfs: &Path, files: &[(String, String)]) {
    for (path, sha) in files {
        let got = std::fs::read(rootfs.join(&path[1..])).expect("placed file");
        assert_eq!(&sha256_hex(&got), sha, "{path} as umoci unpacked it");
    }
}

/// The one layer both platforms added: its digest and size, which must agree.
fn shared_layer(image: &Value) -> (String, u64) {
    let layers: Vec<(String, u64)> = image["platforms"]
        .as_array()
        .expect("platforms")
        .iter()
        .map(|p| {
            assert_eq!(p["outcome"], "patched", "{p:#}");
            let l = &p["added_layer"];
            (
                l["digest"].as_str().expect("digest").to_owned(),
                l["size"].as_u64().expect("size"),
            )
        })
        .collect();
    assert_eq!(layers.len(), 2, "{image:#}");
    assert_eq!(layers[0], layers[1], "identical changes give one layer");
    layers[0].clone()
}

/// Upload commits (`PUT .../blobs/uploads/<id>?digest=D` answered 201) of a blob in an
/// access log.
fn upload_commits(log: &str, digest: &str) -> usize {
    let hex = digest.strip_prefix("sha256:").expect("sha256");
    log.lines()
        .filter(|l| {
            let mut parts = l.split('"');
            let req = parts.nth(1).unwrap_or("");
            let status = parts.next().unwrap_or("").trim_start();
            req.starts_with("PUT ")
                && req.contains("/blobs/uploads/")
                && req.contains(hex)
                && status.starts_with("201")
        })
        .count()
}

fn apply(w: &Path, reg: &Registry, tmp: &Path, patch: &Path) -> Tool {
    Tool::new("apply")
        .cwd(w)
        .backend("cuda")
        .repo(reg.repo())
        .tag(TAG)
        .patch(patch)
        .env("TMPDIR", tmp)
        .json()
}

/// Nothing is left in a temporary directory.
fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .expect("tmp")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

#[test]
fn a_layer_of_tens_of_mb_is_spooled_uploaded_once_and_read_back() {
    let reg = Registry::start();
    reg.seed(&[TAG]);
    let work = tempfile::tempdir().expect("tmp");
    let w = work.path();
    let tmp = w.join("tmp");
    std::fs::create_dir_all(&tmp).expect("mkdir");
    let (patch, files) = big_patch(w);

    // A TMPDIR that cannot be written is named, before anything is pushed.
    let before = reg.storage();
    let bad = apply(w, &reg, &w.join("no-such-dir"), &patch).run();
    assert_ne!(bad.code, 0, "{}", bad.stdout);
    let all = format!("{}{}", bad.stdout, bad.stderr);
    assert!(
        all.contains("no-such-dir") && all.contains("TMPDIR"),
        "{all}"
    );
    assert_eq!(reg.storage(), before, "nothing pushed");

    let log_from = reg.log().len();
    // Into another tag, so the layout run below patches the same original.
    let map = apply(w, &reg, &tmp, &patch)
        .arg("--tag-suffix")
        .arg("-big")
        .ok_json();
    let (digest, size) = shared_layer(&map["images"][0]);
    assert!(size > 20 << 20, "a layer of tens of MB: {size} bytes");
    assert_empty(&tmp);
    // Uploaded once for both platforms, and stored whole: the registry's own file.
    assert_eq!(
        upload_commits(&reg.log()[log_from..], &digest),
        1,
        "{}",
        &reg.log()[log_from..]
    );
    let hex = digest.strip_prefix("sha256:").expect("sha256");
    let stored = format!("docker/registry/v2/blobs/sha256/{}/{hex}/data", &hex[..2]);
    assert_eq!(reg.storage().get(&stored), Some(&size), "{stored}");

    // skopeo and umoci read both platforms back; GNU tar lists the layer.
    let reference = format!("{}:{TAG}-big", reg.repo());
    for arch in ["amd64", "arm64"] {
        let (rootfs, layout) = unpack(&reference, arch, &w.join("unpacked"));
        assert_placed(&rootfs, &files);
        let blob = layout.join("blobs/sha256").join(hex);
        assert_eq!(sha256_hex(&std::fs::read(&blob).expect("blob")), digest);
        let listing = tar_list(&blob);
        for (path, _) in &files {
            assert!(listing.contains(&path[1..]), "{path} in {listing}");
        }
    }

    // Into an OCI layout: the layer copied in whole, unpacked by umoci through skopeo.
    let lay = w.join("layout");
    let target = format!("oci:{}", lay.display());
    let map = apply(w, &reg, &tmp, &patch)
        .target_repo(&target)
        .digest_map("layout.json")
        .ok_json();
    let (in_layout, _) = shared_layer(&map["images"][0]);
    assert_eq!(in_layout, digest, "the same layer, reproducibly");
    assert_empty(&tmp);
    let file = lay.join("blobs/sha256").join(hex);
    assert_eq!(
        sha256_hex(&std::fs::read(&file).expect("layout blob")),
        digest
    );
    // A Docker list keeps its Docker types in the layout, which skopeo's oci: transport does
    // not look up by tag: GNU tar unpacks the layer itself.
    let out = w.join("from-layout");
    std::fs::create_dir_all(&out).expect("mkdir");
    let (f, o) = (file.display().to_string(), out.display().to_string());
    run_tool("tar", &["-xzf", &f, "-C", &o]);
    assert_placed(&out, &files);
}
