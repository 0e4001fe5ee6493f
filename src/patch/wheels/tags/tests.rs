use super::*;
use crate::patch::wheels::target::tests::target;

fn tag(s: &str) -> Tag {
    let mut p = s.splitn(3, '-');
    let mut next = || p.next().unwrap_or_default().to_owned();
    (next(), next(), next())
}

fn wheel(filename: &str) -> LockedWheel {
    LockedWheel {
        filename: filename.to_owned(),
        url: None,
        path: Some(format!("/w/{filename}").into()),
        sha256: "0".repeat(64),
        size: None,
        direct: false,
    }
}

fn package(name: &str, version: &str, files: &[&str]) -> Package {
    Package {
        name: name.to_owned(),
        version: Some(version.to_owned()),
        marker: None,
        requires_python: None,
        wheels: files.iter().map(|f| wheel(f)).collect(),
    }
}

#[test]
fn names_with_build_tags_and_compressed_tag_sets() {
    let n = parse_name("six-1.16.0-py2.py3-none-any.whl").expect("parses");
    assert_eq!(
        (n.dist.as_str(), n.version.as_str(), n.build),
        ("six", "1.16.0", None)
    );
    assert_eq!(n.tags, vec![tag("py2-none-any"), tag("py3-none-any")]);
    let n = parse_name(
        "nvidia_nccl_cu12-2.27.5-1-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    )
    .expect("parses");
    assert_eq!(n.build.as_deref(), Some("1"));
    assert_eq!(n.tags.len(), 2);
    assert_eq!(n.tags[1], tag("py3-none-manylinux_2_17_x86_64"));
    for bad in [
        "six-1.16.0-py3-none-any.zip",
        "six-1.16.0-none-any.whl",
        "six-1.16.0-x1-py3-none-any.whl",
        "six--1.16.0-py3-none-any.whl",
        "six-1.16.0-py3-none-any..whl",
    ] {
        assert!(parse_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn supported_order_matches_packaging_for_cpython_311_x86_64() {
    let s = supported(&target("x86_64", (3, 11), Some((2, 36))));
    let pos = |t: &str| s.iter().position(|x| *x == tag(t)).unwrap_or(usize::MAX);
    // packaging.tags.sys_tags() on CPython 3.11, glibc 2.36, x86_64 starts and ends so.
    assert_eq!(s[0], tag("cp311-cp311-manylinux_2_36_x86_64"));
    assert_eq!(s[1], tag("cp311-cp311-manylinux_2_35_x86_64"));
    assert_eq!(
        pos("cp311-cp311-manylinux2014_x86_64"),
        pos("cp311-cp311-manylinux_2_17_x86_64") + 1
    );
    assert_eq!(
        pos("cp311-cp311-manylinux2010_x86_64"),
        pos("cp311-cp311-manylinux_2_12_x86_64") + 1
    );
    assert_eq!(
        pos("cp311-cp311-manylinux1_x86_64"),
        pos("cp311-cp311-manylinux_2_5_x86_64") + 1
    );
    assert_eq!(
        pos("cp311-cp311-linux_x86_64"),
        pos("cp311-cp311-manylinux1_x86_64") + 1
    );
    // 32 manylinux_2_N (2.36 down to 2.5) + 3 legacy + linux = 36 platforms.
    assert_eq!(pos("cp311-abi3-manylinux_2_36_x86_64"), 36);
    assert!(pos("cp311-none-linux_x86_64") < pos("cp310-abi3-manylinux_2_36_x86_64"));
    assert!(pos("cp32-abi3-linux_x86_64") < pos("py311-none-manylinux_2_36_x86_64"));
    assert_eq!(pos("cp31-abi3-linux_x86_64"), usize::MAX);
    assert!(pos("py3-none-linux_x86_64") < pos("py310-none-manylinux_2_36_x86_64"));
    let n = s.len();
    assert_eq!(s[n - 14], tag("cp311-none-any"));
    assert_eq!(s[n - 13], tag("py311-none-any"));
    assert_eq!(s[n - 12], tag("py3-none-any"));
    assert_eq!(s[n - 11], tag("py310-none-any"));
    assert_eq!(s[n - 1], tag("py30-none-any"));
    // 3 + 9 (cp310..cp32 abi3) + 13 (py311, py3, py310..py30) platform rows, then 14 `any`.
    assert_eq!(n, 36 * (3 + 9 + 13) + 14);
    assert_eq!(pos("cp311-cp311-manylinux_2_37_x86_64"), usize::MAX);
}

#[test]
fn aarch64_stops_at_2_17_and_unknown_glibc_offers_linux_only() {
    let s = supported(&target("aarch64", (3, 12), Some((2, 35))));
    assert!(s.contains(&tag("cp312-cp312-manylinux2014_aarch64")));
    assert!(!s.contains(&tag("cp312-cp312-manylinux_2_16_aarch64")));
    assert!(!s
        .iter()
        .any(|t| t.2.contains("x86_64") || t.2.starts_with("manylinux1")));
    let s = supported(&target("aarch64", (3, 12), None));
    assert!(!s.iter().any(|t| t.2.starts_with("manylinux")));
    assert_eq!(s[0], tag("cp312-cp312-linux_aarch64"));
}

#[test]
fn choose_takes_the_best_ranked_wheel_per_architecture() {
    let pkg = package(
        "torch-ish",
        "1.0",
        &[
            "torch_ish-1.0-cp311-cp311-manylinux_2_28_aarch64.whl",
            "torch_ish-1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
            "torch_ish-1.0-cp311-cp311-manylinux_2_28_x86_64.whl",
            "torch_ish-1.0-py3-none-any.whl",
            "torch_ish-1.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        ],
    );
    let amd = target("x86_64", (3, 11), Some((2, 36)));
    let got = choose(&pkg, &amd).expect("fits");
    assert_eq!(
        got.filename,
        "torch_ish-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    );
    let old = target("x86_64", (3, 11), Some((2, 27)));
    assert!(choose(&pkg, &old)
        .expect("fits")
        .filename
        .contains("manylinux_2_17_x86_64"));
    let arm = target("aarch64", (3, 11), Some((2, 36)));
    assert!(choose(&pkg, &arm)
        .expect("fits")
        .filename
        .ends_with("aarch64.whl"));
    let unknown = target("aarch64", (3, 11), None);
    assert_eq!(
        choose(&pkg, &unknown).expect("pure fits").filename,
        "torch_ish-1.0-py3-none-any.whl"
    );
}

#[test]
fn higher_build_number_breaks_a_tie() {
    let pkg = package(
        "a",
        "1",
        &[
            "a-1-1-py3-none-any.whl",
            "a-1-12-py3-none-any.whl",
            "a-1-py3-none-any.whl",
        ],
    );
    let t = target("x86_64", (3, 11), Some((2, 36)));
    assert_eq!(
        choose(&pkg, &t).expect("fits").filename,
        "a-1-12-py3-none-any.whl"
    );
}

#[test]
fn no_fitting_wheel_names_package_offers_and_needs() {
    let pkg = package(
        "nccl",
        "2.27.5",
        &["nccl-2.27.5-cp311-cp311-manylinux_2_28_x86_64.whl"],
    );
    let e = choose(&pkg, &target("aarch64", (3, 11), Some((2, 35)))).expect_err("wrong arch");
    assert_eq!(
        e,
        "no wheel of nccl 2.27.5 fits linux/arm64 with CPython 3.11 and glibc 2.35 (it offers \
         cp311-cp311-manylinux_2_28_x86_64; the platform needs e.g. cp311-cp311-manylinux_2_35_aarch64)"
    );
    let e = choose(&pkg, &target("x86_64", (3, 11), Some((2, 27)))).expect_err("glibc too old");
    assert!(e.contains("glibc 2.27 (it offers"), "{e}");
    let e = choose(&pkg, &target("x86_64", (3, 12), Some((2, 36)))).expect_err("wrong python");
    assert!(e.contains("CPython 3.12"), "{e}");
    let e = choose(&pkg, &target("x86_64", (3, 11), None)).expect_err("glibc unknown");
    assert!(e.contains("a glibc that could not be read"), "{e}");
    assert!(e.ends_with("needs e.g. cp311-cp311-linux_x86_64)"), "{e}");
}

/// pip's own tag order (its vendored `packaging.tags`, with the glibc it reads set to the
/// target's), one tag a line.
fn pips_order(arch: &str, py: (u32, u32), glibc: (u32, u32)) -> Vec<String> {
    const SCRIPT: &str = r#"
import sys
from pip._vendor.packaging import _manylinux, tags
arch, x, y, ga, gb = sys.argv[1], *map(int, sys.argv[2:])
_manylinux._get_glibc_version = lambda: (ga, gb)
try:
    plats = list(_manylinux.platform_tags([arch]))
except TypeError:
    plats = list(_manylinux.platform_tags("linux_" + arch, arch))
plats.append("linux_" + arch)
cp = "cp%d%d" % (x, y)
out = list(tags.cpython_tags((x, y), [cp], plats)) + list(tags.compatible_tags((x, y), cp, plats))
print("\n".join(str(t) for t in out))
"#;
    let args = [py.0, py.1, glibc.0, glibc.1].map(|n| n.to_string());
    let out = std::process::Command::new("python3")
        .args(["-c", SCRIPT, arch])
        .args(args)
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
fn supported_is_pips_own_order() {
    for (arch, py, glibc) in [
        ("x86_64", (3, 11), (2, 36)),
        ("aarch64", (3, 12), (2, 35)),
        ("x86_64", (3, 8), (2, 17)),
        ("aarch64", (3, 10), (2, 17)),
    ] {
        let ours: Vec<String> = supported(&target(arch, py, Some(glibc)))
            .into_iter()
            .map(|(a, b, c)| format!("{a}-{b}-{c}"))
            .collect();
        assert_eq!(ours, pips_order(arch, py, glibc), "{arch} {py:?} {glibc:?}");
    }
}
