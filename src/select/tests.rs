use std::path::Path;

use super::*;

/// The runner project's `pack/.post_operation/20260205_cuda_reinstall_nccl/matrix.yaml`.
const NCCL: &str = include_str!("../../tests/matrices/20260205_cuda_reinstall_nccl.yaml");

/// The shape of `20251125_mindie_install_posix_ipc` (cann, a variant per rule), with a rule
/// of another backend beside it.
const MINDIE: &str = r#"rules:
  - backend: "cann"
    services: ["mindie"]
    args: ["CANN_VERSION=8.3", "CANN_ARCHS=a3", "MINDIE_VERSION=2.2.rc1"]
  - backend: "cann"
    services: ["mindie"]
    args: ["CANN_VERSION=8.3", "CANN_ARCHS=910b", "MINDIE_VERSION=2.2.rc1"]
  - backend: "cann"
    services: ["mindie"]
    args: ["CANN_VERSION=8.3", "CANN_ARCHS=310p", "MINDIE_VERSION=2.2.rc1"]
  - backend: "cuda"
    services: ["vllm"]
    args: ["CUDA_VERSION=12.9.1", "VLLM_VERSION=0.15.0"]
"#;

/// The shape of `20251219_rocm_install_petit_kernel`: `platforms`, two services, a rule
/// naming a tag another one names too.
const PETIT: &str = r#"rules:
  - backend: "rocm"
    services: ["vllm", "sglang"]
    platforms: ["linux/amd64"]
    args: ["ROCM_VERSION=7.0", "VLLM_VERSION=0.12.0", "SGLANG_VERSION=0.5.6.post2"]
  - backend: "rocm"
    services: ["vllm"]
    platforms: ["linux/amd64"]
    args: ["ROCM_VERSION=7.0", "VLLM_VERSION=0.11.2"]
  - backend: "rocm"
    services: ["vllm"]
    platforms: ["linux/arm64"]
    args: ["ROCM_VERSION=7.0", "VLLM_VERSION=0.11.2"]
"#;

fn parse(text: &str) -> Result<Matrix, Error> {
    Matrix::parse(text, Path::new("post/matrix.yaml"))
}

fn tags(m: &Matrix, backend: Option<&str>) -> Vec<String> {
    m.tags(backend).into_iter().map(|t| t.tag).collect()
}

#[test]
fn the_nccl_matrix_gives_its_eight_tags() {
    let m = parse(NCCL).expect("parses");
    assert_eq!(
        tags(&m, None),
        [
            "cuda12.9-vllm0.15.0",
            "cuda12.9-vllm0.14.1",
            "cuda12.9-sglang0.5.8",
            "cuda12.8-vllm0.15.0",
            "cuda12.8-vllm0.14.1",
            "cuda12.8-sglang0.5.8",
            "cuda12.6-vllm0.15.0",
            "cuda12.6-vllm0.14.1",
        ]
    );
    assert!(m.tags(None).iter().all(|t| t.platforms.is_none()));
    assert_eq!(m.backends(), ["cuda"]);
}

#[test]
fn cann_tags_carry_the_arch_and_versions_are_lowered_and_cut() {
    let m = parse(MINDIE).expect("parses");
    assert_eq!(
        tags(&m, Some("cann")),
        [
            "cann8.3-a3-mindie2.2.rc1",
            "cann8.3-910b-mindie2.2.rc1",
            "cann8.3-310p-mindie2.2.rc1"
        ]
    );
    // CUDA_VERSION=12.9.1 names cuda12.9, as the runner's script cuts it at the minor.
    assert_eq!(tags(&m, Some("cuda")), ["cuda12.9-vllm0.15.0"]);
    assert!(tags(&m, Some("rocm")).is_empty());
    let upper = MINDIE.replace("2.2.rc1", "2.2.RC1");
    let m = parse(&upper).expect("parses");
    assert_eq!(tags(&m, Some("cann"))[0], "cann8.3-a3-mindie2.2.rc1");
}

#[test]
fn platforms_of_a_tag_are_its_rules_platforms_together() {
    let m = parse(PETIT).expect("parses");
    let t = m.tags(None);
    let names: Vec<&str> = t.iter().map(|t| t.tag.as_str()).collect();
    assert_eq!(
        names,
        [
            "rocm7.0-vllm0.12.0",
            "rocm7.0-sglang0.5.6.post2",
            "rocm7.0-vllm0.11.2"
        ]
    );
    let amd = Platforms::new(["linux/amd64".to_owned()]);
    assert_eq!(t[0].platforms.as_ref(), Some(&amd));
    let both = Platforms::new(["linux/arm64".to_owned(), "linux/amd64".to_owned()]);
    assert_eq!(t[2].platforms.as_ref(), Some(&both));
    assert_eq!(t[2].rules, [1, 2]);
    // A rule without `platforms` takes every platform of its tags, whatever another says.
    let open = format!(
        "{PETIT}  - backend: rocm\n    services: [vllm]\n    args: [ROCM_VERSION=7.0, VLLM_VERSION=0.11.2]\n"
    );
    let m = parse(&open).expect("parses");
    assert_eq!(m.tags(None)[2].platforms, None);
}

#[test]
fn platform_names_match_as_docker_platform_does() {
    let arm = Platforms::new(["linux/arm64".to_owned()]);
    assert!(arm.allows("linux/arm64/v8") && arm.allows("linux/arm64"));
    assert!(!arm.allows("linux/amd64") && !arm.allows("windows/arm64"));
    let v7 = Platforms::new(["linux/arm/v7".to_owned()]);
    assert!(v7.allows("linux/arm/v7") && !v7.allows("linux/arm/v6") && !v7.allows("linux/arm"));
    assert_eq!(v7.to_string(), "linux/arm/v7");
}

#[test]
fn malformed_matrices_are_refused_naming_file_and_rule() {
    let bad = |text: &str, needles: &[&str]| {
        let e = parse(text).expect_err(text).to_string();
        assert!(e.contains("post/matrix.yaml"), "{e}");
        for n in needles {
            assert!(e.contains(n), "{e} lacks {n}");
        }
    };
    bad("rules: [", &["is not a runner matrix.yaml"]);
    bad("", &["has no rules"]);
    bad("- backend: cuda", &["is not a runner matrix.yaml"]);
    bad("rules: []", &["has no rules"]);
    bad("other: 1", &["unknown field `other`"]);
    bad(
        "rules:\n  - backend: cuda\n    platform: [linux/amd64]\n    services: [vllm]\n",
        &["unknown field `platform`", "line 3"],
    );
    bad(
        "rules:\n  - backend: cuda\n    args: [CUDA_VERSION=12.9]\n",
        &["rules[0] (backend cuda)", "has no services"],
    );
    bad(
        "rules:\n  - services: [vllm]\n    args: [VLLM_VERSION=0.1.0]\n",
        &["rules[0] (services vllm)", "has no backend"],
    );
    let no_cuda = "rules:\n  - backend: cuda\n    services: [vllm]\n    args: [CUDA_VERSION=12.9, VLLM_VERSION=0.15.0]\n  - backend: cuda\n    services: [vllm, sglang]\n    args: [VLLM_VERSION=0.14.1]\n";
    bad(
        no_cuda,
        &[
            "rules[1] (backend cuda, services vllm, sglang)",
            "no CUDA_VERSION",
        ],
    );
    bad(
        "rules:\n  - backend: cuda\n    services: [vllm, sglang]\n    args: [CUDA_VERSION=12.9, VLLM_VERSION=0.14.1]\n",
        &["no SGLANG_VERSION", "its sglang tag"],
    );
    bad(
        "rules:\n  - backend: cann\n    services: [vllm]\n    args: [CANN_VERSION=8.3, VLLM_VERSION=0.1.0]\n",
        &["no CANN_ARCHS"],
    );
    bad(
        "rules:\n  - backend: cuda\n    services: [vllm]\n    args: [CUDA_VERSION=12, VLLM_VERSION=0.1.0]\n",
        &["CUDA_VERSION=12 has no major.minor"],
    );
    bad(
        "rules:\n  - backend: cuda\n    services: [vllm]\n    args: [CUDA_VERSION 12.9, VLLM_VERSION=0.1.0]\n",
        &["arg \"CUDA_VERSION 12.9\" is not NAME=VALUE"],
    );
    bad(
        "rules:\n  - backend: cuda\n    services: [vllm]\n    platforms: [amd64]\n    args: [CUDA_VERSION=12.9, VLLM_VERSION=0.1.0]\n",
        &["platform \"amd64\" is not os/arch"],
    );
    bad(
        "rules:\n  - backend: cuda\n    services: [vllm]\n    args: [CUDA_VERSION=12.9, VLLM_VERSION=0.1+x]\n",
        &["is not a valid tag"],
    );
    // The last value of a name given twice counts, as the runner's `export`s do.
    let twice = "rules:\n  - backend: cuda\n    services: [vllm]\n    args: [CUDA_VERSION=12.4, CUDA_VERSION=12.9, VLLM_VERSION=0.1.0]\n";
    assert_eq!(
        tags(&parse(twice).expect("parses"), None),
        ["cuda12.9-vllm0.1.0"]
    );
}

fn matrix_file(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(f.path(), text).expect("write");
    f
}

#[test]
fn one_selection_for_tags_matrix_and_discovery() {
    let f = matrix_file(NCCL);
    let req = Request {
        matrix: Some(f.path()),
        ..Default::default()
    };
    let sel = Selection::new(&req).expect("a matrix alone needs no backend");
    let (src, dst) = (
        crate::registry::Repo::parse("gpustack/runner").expect("repo"),
        crate::registry::Repo::parse("example.com/runner").expect("repo"),
    );
    let given = sel.given().expect("explicit").to_vec();
    assert_eq!(given.len(), 8);
    let jobs = sel.jobs(given, &src, &dst);
    assert_eq!(jobs[0].tag, "cuda12.9-vllm0.15.0");
    assert_eq!(jobs[0].target_tag, "cuda12.9-vllm0.15.0");

    // --tag narrows the matrix; a tag it does not give is refused.
    let narrow = ["cuda12.8-sglang0.5.8".to_owned()];
    let req2 = Request {
        tags: &narrow,
        ..req
    };
    let narrowed = Selection::new(&req2).expect("narrowed");
    let one = narrowed.given().expect("given");
    assert_eq!(one.len(), 1);
    let other = ["cuda12.8-sglang0.5.9".to_owned()];
    let e = Selection::new(&Request {
        tags: &other,
        ..req
    })
    .expect_err("not in the matrix")
    .to_string();
    assert!(
        e.contains("--tag cuda12.8-sglang0.5.9 is not a tag matrix"),
        "{e}"
    );

    // --backend picks the matrix's rules of that backend; none is an error.
    let e = Selection::new(&Request {
        backend: Some("rocm"),
        ..req
    })
    .expect_err("no rocm rule")
    .to_string();
    assert!(
        e.contains("has no rule for backend rocm (its rules are for cuda)"),
        "{e}"
    );

    // Without a matrix: --backend is needed, explicit tags must be its own.
    assert!(Selection::new(&Request::default()).is_err());
    let rocm = ["rocm7.2-vllm0.25.1".to_owned()];
    let e = Selection::new(&Request {
        backend: Some("cuda"),
        tags: &rocm,
        ..Default::default()
    })
    .expect_err("another backend")
    .to_string();
    assert!(e.contains("is not a cuda tag"), "{e}");
    let found = Selection::new(&Request {
        backend: Some("cuda"),
        ..Default::default()
    })
    .expect("discovery");
    assert!(found.given().is_none());

    // A suffix making a matrix tag too long is refused before any request.
    let long = "x".repeat(120);
    let e = Selection::new(&Request {
        tag_suffix: &long,
        ..req
    })
    .expect_err("too long")
    .to_string();
    assert!(e.contains("with --tag-suffix"), "{e}");
    let missing = Path::new("/nonexistent/matrix.yaml");
    let e = Selection::new(&Request {
        matrix: Some(missing),
        ..Default::default()
    })
    .expect_err("no file")
    .to_string();
    assert!(
        e.contains("cannot read matrix /nonexistent/matrix.yaml"),
        "{e}"
    );
}
