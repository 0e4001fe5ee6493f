//! containerd as a judge of the built-in fix: the fixture images of every backend (a Docker list,
//! an OCI index, a one-entry list, a single manifest), patched by `apply`, pulled by a containerd
//! of the test's own (`tests/support/containerd.py`) and unpacked on every platform with the
//! `native` and `overlayfs` snapshotters: each shows the file umoci shows, no stale `.pyc` of it,
//! and no unreadable entry. (The runner project's operations, links and bytecode cases:
//! tests/proof/test_post_operations.py and test_containerd_judge.py.)

use serde_json::Value;

use crate::harness::{python, unpack, Registry, Tool};

const TARGET: &str = "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py";

/// `python3 -m tests.support.containerd check`: one row per platform and snapshotter.
fn containerd_check(reg: &Registry, tag: &str, path: &str, dir: &str) -> Vec<Value> {
    let out = python("tests.support.containerd")
        .args([
            "check",
            "--registry",
            &reg.addr,
            "--tag",
            tag,
            "--path",
            path,
        ])
        .args(["--list", dir])
        .output()
        .expect("run tests.support.containerd");
    assert!(
        out.status.success(),
        "containerd could not pull or unpack {tag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[test]
fn containerd_unpacks_every_patched_fixture_as_umoci_does() {
    let reg = Registry::start();
    let tags = [
        ("cuda", "cuda12.9-vllm0.27.1"),
        ("cann", "cann9.0-910b-vllm0.20.2"),
        ("rocm", "rocm7.2-vllm0.25.1"),
        ("cuda", "cuda12.8-vllm0.27.1"),
    ];
    let fixture = reg.seed(&tags.map(|(_, t)| t));
    let work = tempfile::tempdir().expect("tmp");
    for (backend, tag) in tags {
        let run = Tool::new("apply")
            .cwd(work.path())
            .backend(backend)
            .repo(reg.repo())
            .tag(tag)
            .json()
            .run();
        assert_eq!(run.code, 0, "{tag}: {}\n{}", run.stdout, run.stderr);
        let map = run.json();
        assert_eq!(map["images"][0]["outcome"], "patched", "{tag}");
        let file = map["images"][0]["platforms"][0]["file"]
            .as_str()
            .expect("file")
            .to_owned();
        assert!(file.ends_with(TARGET), "{file}");
        let cache = format!("{}/__pycache__", file.rsplit_once('/').expect("dir").0);
        let rows = containerd_check(&reg, tag, &file, &cache);
        let platforms = fixture["images"][tag]["platforms"]
            .as_object()
            .map_or(1, |p| p.len());
        assert_eq!(
            rows.len(),
            2 * platforms,
            "{tag}: both snapshotters, every platform"
        );
        let mut umoci_files = std::collections::BTreeMap::new();
        for row in &rows {
            let platform = row["platform"].as_str().expect("platform");
            let arch = platform.split('/').nth(1).expect("arch").to_owned();
            let umoci = umoci_files.entry(arch.clone()).or_insert_with(|| {
                let (rootfs, _) = unpack(
                    &format!("{}:{tag}", reg.repo()),
                    &arch,
                    &work.path().join(format!("{tag}-{arch}")),
                );
                std::fs::read(rootfs.join(file.trim_start_matches('/'))).expect("umoci")
            });
            assert_eq!(
                row["files"][&file]["sha256"],
                crate::harness::sha256_hex(umoci),
                "{tag} {platform} {}: the file umoci shows",
                row["snapshotter"]
            );
            assert_eq!(row["unreadable"], serde_json::json!([]), "{tag} {row}");
            let stale: Vec<&Value> = row["lists"][&cache]
                .as_array()
                .map(|names| {
                    names
                        .iter()
                        .filter(|n| {
                            n.as_str()
                                .is_some_and(|n| n.starts_with("multi_connector."))
                        })
                        .collect()
                })
                .unwrap_or_default();
            assert!(stale.is_empty(), "{tag} {platform}: stale pyc {stale:?}");
        }
    }
}
