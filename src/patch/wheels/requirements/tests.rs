use serde_json::json;

use super::*;

fn env(pairs: &[(&str, &str)]) -> serde_json::Value {
    let list: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    json!({"architecture": "amd64", "os": "linux", "config": {"Env": list}})
}

fn lines(texts: &[&str]) -> Requirements {
    Requirements {
        file: None,
        lines: texts
            .iter()
            .enumerate()
            .map(|(i, t)| parse_item(t, &format!("patch.toml:{}", i + 1)).unwrap())
            .collect(),
    }
}

#[test]
fn the_four_posix_trims_and_plain_references_read_the_config_env() {
    let cfg = env(&[
        ("CUDA_VERSION", "12.8.1"),
        ("RAY_VERSION", "2.54.0"),
        ("VLLM_TORCH_CUDA_VERSION", "12.9"),
    ]);
    let r = lines(&[
        "nvidia-nccl-cu${VLLM_TORCH_CUDA_VERSION%%.*}==2.27.5",
        "ray[client]==${RAY_VERSION}",
        "a-${CUDA_VERSION%.*}",
        "b-${CUDA_VERSION#*.}",
        "c-${CUDA_VERSION##*.}",
        "d-${CUDA_VERSION%%.*}",
    ]);
    assert_eq!(
        r.for_platform(Some(&cfg)).unwrap(),
        [
            "nvidia-nccl-cu12==2.27.5",
            "ray[client]==2.54.0",
            "a-12.8",
            "b-8.1",
            "c-1",
            "d-12",
        ]
    );
}

#[test]
fn trims_behave_as_the_shell_where_nothing_matches_or_patterns_are_literal() {
    let mut lookup = |_: &str| Some("12".to_owned());
    assert_eq!(expand("x${V%%.*}", &mut lookup).unwrap(), "x12");
    assert_eq!(expand("x${V#*.}", &mut lookup).unwrap(), "x12");
    let mut lookup = |_: &str| Some("2.2.rc1".to_owned());
    assert_eq!(expand("${V%.rc1}", &mut lookup).unwrap(), "2.2");
    assert_eq!(expand("${V#2.}", &mut lookup).unwrap(), "2.rc1");
    assert_eq!(
        expand("$V and $ stay", &mut lookup).unwrap(),
        "$V and $ stay"
    );
}

#[test]
fn an_unset_variable_refuses_the_platform_naming_it_and_the_line() {
    let r = lines(&["torch", "nvidia-nccl-cu${CUDA_MAJOR}==2.27.5"]);
    let err = r
        .for_platform(Some(&env(&[("CUDA_VERSION", "12.8")])))
        .unwrap_err();
    assert_eq!(
        err,
        "patch.toml:2: ${CUDA_MAJOR} is not set in the image config's Env"
    );
    assert!(r.for_platform(None).unwrap_err().contains("CUDA_MAJOR"));
}

#[test]
fn the_last_definition_of_a_name_wins() {
    let cfg = json!({"config": {"Env": ["V=1", "PATH=/bin", "V=2", "EMPTY=", "BROKEN"]}});
    assert_eq!(
        config_env(Some(&cfg)),
        [
            ("PATH".to_owned(), "/bin".to_owned()),
            ("V".to_owned(), "2".to_owned()),
            ("EMPTY".to_owned(), String::new()),
        ]
    );
}

#[test]
fn malformed_references_are_refused_at_load() {
    for (line, says) in [
        ("a-${CUDA", "without its `}`"),
        ("a-${}", "names no variable"),
        ("a-${1X}", "names no variable"),
        ("a-${X:-1}", "is not one of"),
        ("a-${X%%[0-9]*}", "a pattern is a text"),
        ("a-${X%%}", "a pattern is a text"),
    ] {
        let err = parse_item(line, "patch.toml:3").unwrap_err();
        assert!(
            err.starts_with("patch.toml:3: ") && err.contains(says),
            "{line}: {err}"
        );
    }
}

#[test]
fn pep508_lines_are_taken_as_written() {
    for line in [
        "librosa",
        "mistral_common[audio]",
        "triton==3.5.1",
        "ray[client,default]==2.54.0 ; python_version >= \"3.10\"",
        "flash-attn @ https://packages.example.com/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl",
        "posix_ipc>=1.2,<2",
    ] {
        assert_eq!(parse_item(line, "p:1").unwrap().text, line);
    }
}

#[test]
fn option_lines_local_paths_and_urls_that_are_no_wheel_are_refused() {
    for (line, says) in [
        ("-r other.txt", "-r is an option line"),
        (
            "--index-url https://packages.example.com/simple",
            "--index-url is an option line",
        ),
        (
            "-e git+https://example.com/x.git#egg=x",
            "-e is an option line",
        ),
        (
            "--extra-index-url=https://x/simple",
            "--extra-index-url=https://x/simple is an option line",
        ),
        ("-c constraints.txt", "-c is an option line"),
        ("./wheels/pkg-1.0-py3-none-any.whl", "is a local path"),
        ("/abs/pkg-1.0-py3-none-any.whl", "is a local path"),
        ("pkg-1.0-py3-none-any.whl", "is a local path"),
        (
            "pkg @ file:///wheels/pkg-1.0-py3-none-any.whl",
            "is a local path",
        ),
        (
            "https://packages.example.com/pkg-1.0-py3-none-any.whl",
            "a URL without a name",
        ),
        (
            "pkg @ https://packages.example.com/pkg-1.0.tar.gz",
            "is not a wheel's URL",
        ),
        ("pkg @ git+https://example.com/pkg.git", "only http(s) URLs"),
        ("pkg >= = 1", "not a PEP 508 requirement"),
    ] {
        let err = parse_item(line, "patch.toml:9").unwrap_err();
        assert!(
            err.starts_with("patch.toml:9: ") && err.contains(says),
            "{line}: {err}"
        );
    }
}

#[test]
fn a_requirements_file_is_read_as_uv_reads_one() {
    let text =
        "# audio extras\nlibrosa\n\nsoundfile  # pinned below\nmistral_common[audio] \\\n  >=1.8\n";
    let got = parse_file(text, "requirements.txt").unwrap();
    let shown: Vec<(&str, &str)> = got
        .iter()
        .map(|l| (l.text.as_str(), l.origin.as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            ("librosa", "requirements.txt:2"),
            ("soundfile", "requirements.txt:4"),
            ("mistral_common[audio]   >=1.8", "requirements.txt:5"),
        ]
    );
    // A URL's fragment is not a comment.
    let got = parse_file(
        "x @ https://h.example/x-1-py3-none-any.whl#sha256=00\n",
        "r.txt",
    )
    .unwrap();
    assert!(got[0].text.ends_with("#sha256=00"));
}

#[test]
fn a_requirements_file_names_the_line_it_refuses() {
    let text = "librosa\n# a comment\n--extra-index-url https://packages.example.com/simple\n";
    assert_eq!(
        parse_file(text, "reqs/requirements.txt").unwrap_err(),
        "reqs/requirements.txt:3: --extra-index-url is an option line; a wheels patch takes requirement lines only (its index options are patch.toml's index-url, extra-index-url, find-links and no-index)"
    );
    assert!(parse_file("a\n../local/pkg\n", "r.txt")
        .unwrap_err()
        .starts_with("r.txt:2: ../local/pkg is a local path"));
    assert_eq!(
        parse_file("# nothing\n\n", "r.txt").unwrap_err(),
        "r.txt: holds no requirement"
    );
    assert!(parse_file("a \\", "r.txt")
        .unwrap_err()
        .contains("continuation"));
}

#[test]
fn a_value_that_makes_a_line_unreadable_names_the_line() {
    let r = lines(&["pkg==${V}"]);
    let err = r.for_platform(Some(&env(&[("V", "1 2")]))).unwrap_err();
    assert!(
        err.starts_with("patch.toml:1: \"pkg==1 2\" with the image's Env: "),
        "{err}"
    );
}
