//! `--matrix`: the runner project's own post-operation matrices (the shapes of
//! `20260205_cuda_reinstall_nccl`, `20251125_mindie_install_posix_ipc` and
//! `20251219_rocm_install_petit_kernel`) against a registry holding each tag they name and near
//! misses (another CUDA version, `-dev` tags, another service version): `plan` names exactly
//! their tags, `apply` moves exactly those (skopeo reads every digest before and after),
//! platforms outside a rule's `platforms` keep their manifests in the patched index, a tag the
//! repository lacks is named with exit 2, and a malformed matrix is refused before any request.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::harness::{retag, served, skopeo_raw, Registry, Tool};

/// `pack/.post_operation/20260205_cuda_reinstall_nccl/matrix.yaml`: 8 tags.
const NCCL: &str = include_str!("../matrices/20260205_cuda_reinstall_nccl.yaml");

const NCCL_TAGS: [&str; 8] = [
    "cuda12.9-vllm0.15.0",
    "cuda12.9-vllm0.14.1",
    "cuda12.9-sglang0.5.8",
    "cuda12.8-vllm0.15.0",
    "cuda12.8-vllm0.14.1",
    "cuda12.8-sglang0.5.8",
    "cuda12.6-vllm0.15.0",
    "cuda12.6-vllm0.14.1",
];

/// `20251125_mindie_install_posix_ipc`: cann, one variant per rule.
const MINDIE: &str = r#"rules:

  #
  # Ascend CANN
  #

  ## Packed Ascend CANN 8.3, using CANN Kernel for A3.
  ##
  - backend: "cann"
    services:
      - "mindie"
    args:
      - "CANN_VERSION=8.3"
      - "CANN_ARCHS=a3"
      - "MINDIE_VERSION=2.2.rc1"
  ## Packed Ascend CANN 8.3, using CANN Kernel for 910B.
  ##
  - backend: "cann"
    services:
      - "mindie"
    args:
      - "CANN_VERSION=8.3"
      - "CANN_ARCHS=910b"
      - "MINDIE_VERSION=2.2.rc1"
  ## Packed Ascend CANN 8.3, using CANN Kernel for 310P.
  ##
  - backend: "cann"
    services:
      - "mindie"
    args:
      - "CANN_VERSION=8.3"
      - "CANN_ARCHS=310p"
      - "MINDIE_VERSION=2.2.rc1"
"#;

/// `20251219_rocm_install_petit_kernel`: every rule limited to linux/amd64, two services per
/// rule, and the file's own doubled comment block.
const PETIT: &str = r#"rules:

  #
  # AMD ROCm
  #

    #
  # AMD ROCm
  #

  ## Packed AMD ROCm 7.0.
  ##
  - backend: "rocm"
    services:
      - "vllm"
      - "sglang"
    platforms:
      - "linux/amd64"
    args:
      - "ROCM_VERSION=7.0"
      - "VLLM_VERSION=0.12.0"
      - "SGLANG_VERSION=0.5.6.post2"
  - backend: "rocm"
    services:
      - "vllm"
    platforms:
      - "linux/amd64"
    args:
      - "ROCM_VERSION=7.0"
      - "VLLM_VERSION=0.11.2"
  ## Packed AMD ROCm 6.4.
  ##
  - backend: "rocm"
    services:
      - "vllm"
      - "sglang"
    platforms:
      - "linux/amd64"
    args:
      - "ROCM_VERSION=6.4"
      - "VLLM_VERSION=0.12.0"
      - "SGLANG_VERSION=0.5.6.post2"
  - backend: "rocm"
    services:
      - "vllm"
      - "sglang"
    platforms:
      - "linux/amd64"
    args:
      - "ROCM_VERSION=6.4"
      - "VLLM_VERSION=0.11.2"
      - "SGLANG_VERSION=0.5.5.post3"
"#;

const PETIT_TAGS: [&str; 7] = [
    "rocm7.0-vllm0.12.0",
    "rocm7.0-sglang0.5.6.post2",
    "rocm7.0-vllm0.11.2",
    "rocm6.4-vllm0.12.0",
    "rocm6.4-sglang0.5.6.post2",
    "rocm6.4-vllm0.11.2",
    "rocm6.4-sglang0.5.5.post3",
];

/// The two-platform fixture (linux/amd64 and linux/arm64) every named tag is a copy of.
const SOURCE: &str = "cuda12.9-vllm0.27.1";

/// A `files` patch for any service and backend, so that what the matrix selects is what moves.
fn conf_patch(dir: &Path) -> PathBuf {
    let f = dir.join("post-op");
    std::fs::create_dir_all(&f).expect("mkdir");
    std::fs::write(
        f.join("patch.toml"),
        "id = \"post-op-conf\"\nkind = \"files\"\ntitle = \"t\"\n[[files]]\npath = \"/etc/post-op.conf\"\nsource = \"post-op.conf\"\nmode = 0o644\n",
    )
    .expect("patch.toml");
    std::fs::write(f.join("post-op.conf"), "done = 1\n").expect("conf");
    f
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write matrix");
    p
}

/// The tags an output map names, in its order.
fn sources(map: &Value) -> Vec<String> {
    map["images"]
        .as_array()
        .expect("images")
        .iter()
        .map(|i| {
            let s = i["source"].as_str().expect("source");
            s.rsplit(':').next().expect("tag").to_owned()
        })
        .collect()
}

/// Each tag with the digest it serves.
fn digests(reg: &Registry, tags: &[&str]) -> Vec<(String, String)> {
    tags.iter()
        .map(|t| (t.to_string(), served(&format!("{}:{t}", reg.repo()))))
        .collect()
}

/// An index's children by platform (`linux/amd64` -> digest), as skopeo reads it.
fn children(reference: &str) -> Vec<(String, String)> {
    let index: Value = serde_json::from_slice(&skopeo_raw(reference)).expect("index json");
    index["manifests"]
        .as_array()
        .expect("an index")
        .iter()
        .map(|m| {
            let p = &m["platform"];
            (
                format!(
                    "{}/{}",
                    p["os"].as_str().unwrap_or("?"),
                    p["architecture"].as_str().unwrap_or("?")
                ),
                m["digest"].as_str().expect("digest").to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_nccl_matrix_plans_and_moves_exactly_its_eight_tags() {
    let reg = Registry::start();
    reg.seed(&[SOURCE]);
    let near = [
        "cuda13.0-vllm0.15.0",      // another CUDA version
        "cuda12.9-vllm0.15.0-dev",  // the -dev tag of a named one
        "cuda12.9-vllm0.15.1",      // another service version
        "cuda12.6-sglang0.5.8",     // a service the 12.6 rules do not name
        "cuda12.9-sglang0.5.8-dev", // and -dev again
    ];
    for t in NCCL_TAGS.iter().chain(&near) {
        retag(&reg, SOURCE, t);
    }
    let work = tempfile::tempdir().expect("tmp");
    let matrix = write(work.path(), "matrix.yaml", NCCL);
    let patch = conf_patch(work.path());
    let base = |cmd: &str| {
        Tool::new(cmd)
            .cwd(work.path())
            .repo(reg.repo())
            .arg("--matrix")
            .arg(&matrix)
            .patch(&patch)
    };

    // plan, without --backend: the 8 tags in the matrix's order, nothing written.
    let before = reg.storage();
    let plan = base("plan").json().run();
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let planned = plan.json();
    assert_eq!(sources(&planned), NCCL_TAGS);
    for img in planned["images"].as_array().expect("images") {
        assert_eq!(img["outcome"], "patched", "{img}");
    }
    assert!(
        plan.stderr
            .contains("matrix.yaml: 8 tag(s): cuda12.9-vllm0.15.0, "),
        "{}",
        plan.stderr
    );
    let text = base("plan").backend("cuda").run();
    assert_eq!(text.code, 0, "{}", text.stderr);
    for t in NCCL_TAGS {
        assert!(
            text.stdout.contains(&format!(":{t}\n")),
            "{t}: {}",
            text.stdout
        );
    }
    for t in near {
        assert!(
            !text.stdout.contains(&format!(":{t}\n")),
            "{t}: {}",
            text.stdout
        );
    }
    assert_eq!(reg.storage(), before, "plan wrote to the registry");

    // The patch's own `services` still decide: the built-in vLLM fix leaves the sglang tags.
    let builtin = Tool::new("plan")
        .cwd(work.path())
        .repo(reg.repo())
        .arg("--matrix")
        .arg(&matrix)
        .json()
        .run();
    assert_eq!(builtin.code, 0, "{}", builtin.stderr);
    let m = builtin.json();
    assert_eq!(sources(&m), NCCL_TAGS);
    for img in m["images"].as_array().expect("images") {
        let sglang = img["source"].as_str().expect("s").contains("-sglang");
        let want = if sglang { "not-affected" } else { "patched" };
        assert_eq!(img["outcome"], want, "{img}");
    }

    // apply: exactly the 8 tags move; every near miss serves the digest it served.
    let named_before = digests(&reg, &NCCL_TAGS);
    let near_before = digests(&reg, &near);
    let run = base("apply").run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    for (tag, was) in &named_before {
        let now = served(&format!("{}:{tag}", reg.repo()));
        assert_ne!(&now, was, "{tag} did not move");
    }
    assert_eq!(digests(&reg, &near), near_before, "a near miss moved");
    let map: Value = serde_json::from_slice(
        &std::fs::read(work.path().join("runner-patch-manifest.json")).expect("map"),
    )
    .expect("json");
    assert_eq!(sources(&map), NCCL_TAGS);
    verify_ok(work.path(), &patch);
}

/// `verify` of the map apply wrote in `work` passes.
fn verify_ok(work: &Path, patch: &Path) {
    let verify = Tool::new("verify")
        .cwd(work)
        .patch(patch)
        .digest_map(work.join("runner-patch-manifest.json"))
        .run();
    assert_eq!(verify.code, 0, "{}\n{}", verify.stdout, verify.stderr);
}

#[test]
fn a_cann_matrix_names_the_tag_the_repository_lacks_and_exits_2() {
    let reg = Registry::start();
    let cann = "cann9.0-910b-vllm0.20.2";
    reg.seed(&[cann]);
    // The 310p tag of the matrix is absent.
    let present = ["cann8.3-a3-mindie2.2.rc1", "cann8.3-910b-mindie2.2.rc1"];
    let near = [
        "cann8.3-910b-mindie2.2.rc1-dev", // -dev
        "cann8.2-910b-mindie2.2.rc1",     // another CANN version
        "cann8.3-910b-mindie2.1.rc2",     // another service version
        "cann8.3-310p-mindie2.1.rc2",     // the missing one's near miss
    ];
    for t in present.iter().chain(&near) {
        retag(&reg, cann, t);
    }
    let work = tempfile::tempdir().expect("tmp");
    let matrix = write(work.path(), "matrix.yaml", MINDIE);
    let patch = conf_patch(work.path());
    let near_before = digests(&reg, &near);
    let present_before = digests(&reg, &present);
    let run = Tool::new("apply")
        .cwd(work.path())
        .repo(reg.repo())
        .arg("--matrix")
        .arg(&matrix)
        .patch(&patch)
        .run();
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("runner-patch: error"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", run.stderr);
    assert!(
        errors[0].contains(":cann8.3-310p-mindie2.2.rc1:"),
        "{}",
        errors[0]
    );
    // The tags that are there are patched all the same, as with a missing --tag.
    for (tag, was) in &present_before {
        assert_ne!(&served(&format!("{}:{tag}", reg.repo())), was, "{tag}");
    }
    assert_eq!(digests(&reg, &near), near_before, "a near miss moved");
    let map: Value = serde_json::from_slice(
        &std::fs::read(work.path().join("runner-patch-manifest.json")).expect("map"),
    )
    .expect("json");
    assert_eq!(sources(&map), present);
    // plan names the missing one in its table too.
    let plan = Tool::new("plan")
        .cwd(work.path())
        .repo(reg.repo())
        .backend("cann")
        .arg("--matrix")
        .arg(&matrix)
        .patch(&patch)
        .run();
    assert_eq!(plan.code, 2, "{}", plan.stderr);
    assert!(
        plan.stdout.contains(":cann8.3-310p-mindie2.2.rc1\n  error"),
        "{}",
        plan.stdout
    );
}

#[test]
fn platforms_outside_a_rule_keep_their_manifests_in_the_patched_index() {
    let reg = Registry::start();
    reg.seed(&[SOURCE]);
    let near = [
        "rocm7.0-vllm0.12.0-dev", // -dev
        "rocm7.2-vllm0.12.0",     // another ROCm version
        "rocm7.0-sglang0.5.6",    // another service version
    ];
    for t in PETIT_TAGS.iter().chain(&near) {
        retag(&reg, SOURCE, t);
    }
    let work = tempfile::tempdir().expect("tmp");
    let matrix = write(work.path(), "matrix.yaml", PETIT);
    let patch = conf_patch(work.path());
    let original = children(&format!("{}:{SOURCE}", reg.repo()));
    assert_eq!(original.len(), 2, "{original:?}");
    let near_before = digests(&reg, &near);

    let plan = Tool::new("plan")
        .cwd(work.path())
        .repo(reg.repo())
        .arg("--matrix")
        .arg(&matrix)
        .patch(&patch)
        .json()
        .run();
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let planned = plan.json();
    assert_eq!(sources(&planned), PETIT_TAGS);
    for img in planned["images"].as_array().expect("images") {
        for p in img["platforms"].as_array().expect("platforms") {
            let amd = p["platform"] == "linux/amd64";
            assert_eq!(
                p["outcome"],
                if amd { "patched" } else { "not-affected" },
                "{p}"
            );
            if !amd {
                assert_eq!(p["bytes_scanned"], 0, "{p}");
                assert!(
                    p["reason"]
                        .as_str()
                        .is_some_and(|r| r.contains("selected for this tag (linux/amd64)")),
                    "{p}"
                );
            }
        }
    }

    let run = Tool::new("apply")
        .cwd(work.path())
        .repo(reg.repo())
        .arg("--matrix")
        .arg(&matrix)
        .patch(&patch)
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    for tag in PETIT_TAGS {
        let now = children(&format!("{}:{tag}", reg.repo()));
        assert_eq!(now.len(), 2, "{tag}: {now:?}");
        for ((plat, digest), (oplat, odigest)) in now.iter().zip(&original) {
            assert_eq!(plat, oplat, "{tag}: the index keeps its order");
            if plat == "linux/amd64" {
                assert_ne!(digest, odigest, "{tag}: linux/amd64 was not patched");
            } else {
                assert_eq!(digest, odigest, "{tag}: {plat} changed");
            }
        }
    }
    assert_eq!(digests(&reg, &near), near_before, "a near miss moved");
    // verify takes the platform left as it is for what it is: an original child.
    verify_ok(work.path(), &patch);
}

#[test]
fn malformed_matrices_are_refused_before_any_request() {
    let work = tempfile::tempdir().expect("tmp");
    // Nothing listens there: a request would fail with a connection error, not these.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = l.local_addr().expect("addr");
        drop(l);
        format!("{a}/gpustack/runner")
    };
    let no_cuda = NCCL.replacen("      - \"CUDA_VERSION=12.8\"\n", "", 1);
    let no_services = MINDIE.replacen("    services:\n      - \"mindie\"\n", "", 1);
    let cases: Vec<(String, &str, Vec<&str>)> = vec![
        (
            "rules:\n  - backend: \"cuda\"\n    services: [\"vllm\"\n".into(),
            "bad.yaml",
            vec!["matrix ", "bad.yaml is not a runner matrix.yaml", "line "],
        ),
        (
            no_services,
            "no-services.yaml",
            vec!["no-services.yaml: rules[0] (backend cann): has no services"],
        ),
        (
            no_cuda,
            "no-cuda.yaml",
            vec![
                "no-cuda.yaml: rules[2] (backend cuda, services vllm): no CUDA_VERSION in its args",
            ],
        ),
        (
            PETIT.replacen("platforms:", "platform:", 1),
            "typo.yaml",
            vec![
                "typo.yaml is not a runner matrix.yaml",
                "unknown field `platform`",
            ],
        ),
    ];
    let patch = conf_patch(work.path());
    for (text, name, needles) in cases {
        let path = write(work.path(), name, &text);
        for cmd in ["plan", "apply"] {
            let run = Tool::new(cmd)
                .cwd(work.path())
                .repo(&dead)
                .arg("--matrix")
                .arg(&path)
                .patch(&patch)
                .run();
            assert_eq!(run.code, 2, "{cmd} {name}: {}", run.stderr);
            let lines: Vec<&str> = run.stderr.lines().collect();
            assert_eq!(lines.len(), 1, "{cmd} {name}: {}", run.stderr);
            for n in &needles {
                assert!(
                    lines[0].contains(n),
                    "{cmd} {name}: lacks {n:?}: {}",
                    lines[0]
                );
            }
            assert!(!work.path().join("runner-patch-manifest.json").exists());
        }
    }
    // A --tag the matrix does not give, and a backend it has no rule for: refused the same way.
    let nccl = write(work.path(), "nccl.yaml", NCCL);
    let refused = [
        (
            Tool::new("plan").tag("cuda12.9-vllm0.15.1"),
            "--tag cuda12.9-vllm0.15.1 is not a tag matrix",
        ),
        (
            Tool::new("plan").backend("rocm"),
            "has no rule for backend rocm (its rules are for cuda)",
        ),
    ];
    for (tool, needle) in refused {
        let run = tool
            .cwd(work.path())
            .repo(&dead)
            .arg("--matrix")
            .arg(&nccl)
            .run();
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains(needle), "{}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    }
    // Without a matrix, --backend is still required.
    let run = Tool::new("plan").cwd(work.path()).repo(&dead).run();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--backend <BACKEND>"), "{}", run.stderr);
}
