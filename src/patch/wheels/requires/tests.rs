use super::*;
use crate::patch::wheels::target::tests::target;

fn meta(name: &str, version: &str, requires: &[&str]) -> Metadata {
    Metadata {
        name: name.to_owned(),
        version: version.to_owned(),
        requires_dist: requires.iter().map(|r| r.to_string()).collect(),
        requires_python: None,
    }
}

#[test]
fn metadata_headers_with_continuations_and_a_body() {
    let text = b"Metadata-Version: 2.1\r\nName: Foo.Bar\nVersion: 2.0\nSummary: a long\n  summary\nRequires-Dist: b>=2\nRequires-Dist: c ; extra == \"x\"\nrequires-python: >=3.9\n\nRequires-Dist: not-a-header\n";
    let m = parse_metadata(text).expect("parses");
    assert_eq!(m.name, "Foo.Bar");
    assert_eq!(m.version, "2.0");
    assert_eq!(
        m.requires_dist,
        vec!["b>=2".to_owned(), "c ; extra == \"x\"".to_owned()]
    );
    assert_eq!(m.requires_python.as_deref(), Some(">=3.9"));
    assert!(parse_metadata(b"Name: a\n")
        .expect_err("no version")
        .contains("Version"));
    assert!(parse_metadata(b" x\nName: a\n").is_err());
    assert!(parse_metadata(b"Name a\n")
        .expect_err("no colon")
        .contains("without a colon"));
    assert!(parse_metadata(b"Name: \xff\nVersion: 1\n")
        .expect_err("bytes")
        .contains("UTF-8"));
}

#[test]
fn pep503_names() {
    assert_eq!(normalize("Foo.Bar__baz-"), "foo-bar-baz");
    assert_eq!(normalize("nvidia_nccl_cu12"), "nvidia-nccl-cu12");
    assert_eq!(normalize("Nvidia-NCCL.cu12"), "nvidia-nccl-cu12");
}

#[test]
fn markers_and_requires_python_for_the_target() {
    let amd = target("x86_64", (3, 11), Some((2, 36)));
    let arm = target("aarch64", (3, 12), Some((2, 36)));
    let m = "platform_machine == 'x86_64' and sys_platform == 'linux'";
    assert_eq!(applies(Some(m), &amd), Ok(true));
    assert_eq!(applies(Some(m), &arm), Ok(false));
    assert_eq!(applies(Some("python_version < \"3.12\""), &amd), Ok(true));
    assert_eq!(applies(Some("python_version < \"3.12\""), &arm), Ok(false));
    assert_eq!(
        applies(Some("python_full_version >= '3.11.2'"), &amd),
        Ok(true)
    );
    assert_eq!(
        applies(
            Some("os_name == 'nt' or platform_system == 'Windows'"),
            &amd
        ),
        Ok(false)
    );
    assert_eq!(
        applies(Some("implementation_name == 'cpython'"), &amd),
        Ok(true)
    );
    assert_eq!(applies(Some("extra == 'gpu'"), &amd), Ok(false));
    assert_eq!(applies(None, &amd), Ok(true));
    assert!(applies(Some("python_version <<< 3"), &amd)
        .expect_err("bad")
        .starts_with("marker "));
    assert_eq!(python_ok(">=3.9,<3.12", &amd), Ok(true));
    assert_eq!(python_ok(">=3.9,<3.12", &arm), Ok(false));
    assert_eq!(python_ok(">=3.11.3", &amd), Ok(false), "3.11.2");
    assert!(python_ok(">=three", &amd).is_err());
}

#[test]
fn missing_names_the_requirement_and_what_the_image_has() {
    let t = target("x86_64", (3, 11), Some((2, 36)));
    let new = vec![meta(
        "vllm",
        "0.11.0",
        &[
            "torch==2.8.0",
            "xformers; platform_machine == 'x86_64'",
            "pywin32; sys_platform == 'win32'",
            "pytest; extra == 'test'",
            "Numpy>=1.20",
            "six",
        ],
    )];
    let after = vec![
        new[0].clone(),
        meta("torch", "2.9.0", &[]),
        meta("numpy", "2.0.0rc1", &[]),
        meta("Six", "1.16", &[]),
    ];
    assert_eq!(
        missing(&new, &after, &t),
        vec![
            "vllm 0.11.0 requires torch==2.8.0, but the image would have torch 2.9.0".to_owned(),
            "vllm 0.11.0 requires xformers; platform_machine == 'x86_64', which is neither installed nor locked"
                .to_owned(),
        ]
    );
    let bad = vec![meta("a", "1", &["b >= = 2"])];
    let got = missing(&bad, &bad, &t);
    assert_eq!(got.len(), 1);
    assert!(
        got[0].starts_with("a 1 has a Requires-Dist that cannot be read (\"b >= = 2\")"),
        "{}",
        got[0]
    );
}

#[test]
fn broken_lists_only_what_the_change_breaks_in_pip_checks_words() {
    let t = target("x86_64", (3, 11), Some((2, 36)));
    let vllm = meta(
        "vLLM",
        "0.11.0",
        &[
            "torch==2.8.0",
            "triton==3.4.0; platform_machine == \"x86_64\"",
            "runai_model_streamer",
            "already-missing",
            "numpy<3,>=1.2",
        ],
    );
    let before = vec![
        vllm.clone(),
        meta("torch", "2.8.0", &[]),
        meta("triton", "3.4.0", &[]),
        meta("runai-model-streamer", "0.1", &[]),
        meta("numpy", "2.1", &[]),
    ];
    let new = vec![meta("triton", "3.5.1", &[]), meta("numpy", "3.0", &[])];
    let after = vec![
        vllm,
        meta("torch", "2.8.0", &[]),
        new[0].clone(),
        new[1].clone(),
    ];
    assert_eq!(
        broken(&new, &before, &after, &t),
        vec![
            "vllm 0.11.0 has requirement triton==3.4.0; platform_machine == \"x86_64\", but you have triton 3.5.1."
                .to_owned(),
            "vllm 0.11.0 requires runai-model-streamer, which is not installed.".to_owned(),
            "vllm 0.11.0 has requirement numpy<3,>=1.2, but you have numpy 3.0.".to_owned(),
        ]
    );
    // The new dists' own requirements are `missing`'s business, not pip check's lines here.
    let new = vec![meta("torch", "2.9.0", &["nothing-here"])];
    let after = vec![new[0].clone()];
    assert_eq!(broken(&new, &after, &after, &t), Vec::<String>::new());
}

/// `str(Requirement(r))` by pip's vendored `packaging`, one a line (what `pip check` prints).
fn pips_text(reqs: &[&str]) -> Vec<String> {
    const SCRIPT: &str = r#"
import sys
from pip._vendor.packaging.requirements import Requirement
for r in sys.argv[1:]:
    print(Requirement(r))
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", SCRIPT])
        .args(reqs)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn requirements_are_shown_as_pip_check_shows_them() {
    let reqs = [
        "torch==2.8.0",
        "numpy <3, >=1.2",
        "Foo_Bar[b,a] ~= 1.4 ; python_version<'3.12'",
        "triton==3.4.0; platform_system == \"Linux\" and platform_machine == \"x86_64\"",
        "x ; (os_name=='posix' or sys_platform == \"darwin\") and extra == 'gpu'",
        "y!=1.*,>1",
        "z; python_version not in '3.8, 3.9'",
    ];
    let ours: Vec<String> = reqs
        .iter()
        .map(|r| shown(&Requirement::from_str(r).expect("parses"), r))
        .collect();
    assert_eq!(ours, pips_text(&reqs));
}

/// This machine's Python as a target (what `python3 -m pip check` evaluates markers for).
fn this_python() -> Target {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, platform; print(*sys.version_info[:3], platform.machine())",
        ])
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let f: Vec<&str> = text.split_whitespace().collect();
    let n = |i: usize| f[i].parse::<u32>().expect("a number");
    let mut t = target(f[3], (n(0), n(1)), Some((2, 36)));
    t.python_full = format!("{}.{}.{}", f[0], f[1], f[2]);
    t
}

#[test]
fn check_lines_are_pip_checks_own() {
    let dists = [
        meta(
            "RP_A",
            "1.0",
            &[
                "rp-b>=2.0",
                "rp-c; python_version >= \"3\"",
                "rp-d; extra == \"x\"",
                "rp_E<2,>=1",
            ],
        ),
        meta(
            "rp.b",
            "2.0-rc1",
            &["rp-a==1.0", "rp-c; python_version < \"3\""],
        ),
        meta(
            "rp-e",
            "2.1",
            &[
                "rp-f; platform_machine == 'no-such-machine'",
                "rp-a!=1.*; os_name == 'posix'",
            ],
        ),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    for d in &dists {
        let info = dir.path().join(format!(
            "{}-{}.dist-info",
            normalize(&d.name).replace('-', "_"),
            d.version
        ));
        std::fs::create_dir(&info).expect("mkdir");
        let mut text = format!(
            "Metadata-Version: 2.1\nName: {}\nVersion: {}\n",
            d.name, d.version
        );
        for r in &d.requires_dist {
            text.push_str(&format!("Requires-Dist: {r}\n"));
        }
        std::fs::write(info.join("METADATA"), text).expect("write");
    }
    let out = std::process::Command::new("python3")
        .args(["-m", "pip", "check"])
        .env("PYTHONPATH", dir.path())
        .output()
        .expect("pip check runs");
    let mut pips: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("rp-"))
        .map(str::to_owned)
        .collect();
    let t = this_python();
    let env = environment(&t).expect("environment");
    let have = by_name(&dists);
    let mut ours: Vec<String> = dists.iter().flat_map(|d| check(d, &have, &env)).collect();
    pips.sort();
    ours.sort();
    assert_eq!(ours.len(), 4, "{ours:?}");
    assert_eq!(ours, pips);
}
