//! Which locked wheel fits a platform: the tags CPython X.Y on glibc Linux supports, in pip's
//! order (`packaging.tags`), and the choice of the best-ranked wheel.

use std::collections::BTreeMap;

pub use super::filename::{parse_name, Tag, WheelName};
use super::lock::{LockedWheel, Package};
use super::target::Target;

/// The platform tags of glibc Linux on `arch`, best first: `manylinux_2_N` from the image's
/// glibc down (to 2.5 on x86_64, 2.17 elsewhere) with the legacy aliases after their
/// equivalents, then `linux_<arch>`. No glibc known: `linux_<arch>` only.
fn platforms(arch: &str, glibc: Option<(u32, u32)>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some((major, minor)) = glibc.filter(|g| g.0 == 2) {
        let oldest = if arch == "x86_64" || arch == "i686" {
            5
        } else {
            17
        };
        for m in (oldest..=minor).rev() {
            out.push(format!("manylinux_{major}_{m}_{arch}"));
            let legacy = match m {
                17 => Some("manylinux2014"),
                12 if oldest <= 12 => Some("manylinux2010"),
                5 if oldest <= 5 => Some("manylinux1"),
                _ => None,
            };
            if let Some(l) = legacy {
                out.push(format!("{l}_{arch}"));
            }
        }
    }
    out.push(format!("linux_{arch}"));
    out
}

/// The tags `t` supports, in pip's order, best first (`packaging.tags.sys_tags` for CPython).
pub fn supported(t: &Target) -> Vec<Tag> {
    let (x, y) = t.python;
    let plats = platforms(&t.arch, t.glibc);
    let cp = format!("cp{x}{y}");
    let tag = |a: &str, b: &str, c: &str| (a.to_owned(), b.to_owned(), c.to_owned());
    let mut out = Vec::new();
    for abi in [cp.as_str(), "abi3", "none"] {
        if abi == "abi3" && (x, y) < (3, 2) {
            continue;
        }
        out.extend(plats.iter().map(|p| tag(&cp, abi, p)));
    }
    if (x, y) >= (3, 2) {
        for m in (2..y).rev() {
            out.extend(plats.iter().map(|p| tag(&format!("cp{x}{m}"), "abi3", p)));
        }
    }
    let mut pys = vec![format!("py{x}{y}"), format!("py{x}")];
    pys.extend((0..y).rev().map(|m| format!("py{x}{m}")));
    for py in &pys {
        out.extend(plats.iter().map(|p| tag(py, "none", p)));
    }
    out.push(tag(&cp, "none", "any"));
    out.extend(pys.iter().map(|py| tag(py, "none", "any")));
    out
}

/// How the platform is named in a refusal: "linux/arm64 with CPython 3.11 and glibc 2.35".
fn platform_line(t: &Target) -> String {
    let os_arch = match t.arch.as_str() {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let libc = match t.glibc {
        Some((a, b)) => format!("glibc {a}.{b}"),
        None => {
            "a glibc that could not be read (only wheels without manylinux tags fit)".to_owned()
        }
    };
    format!(
        "linux/{os_arch} with CPython {}.{} and {libc}",
        t.python.0, t.python.1
    )
}

/// The one wheel of `pkg` that fits, or a line naming the package and the tags it needed. The
/// best-ranked tag wins; a tie goes to the higher build number, then to the first listed.
pub fn choose<'a>(pkg: &'a Package, t: &Target) -> Result<&'a LockedWheel, String> {
    let rank: BTreeMap<Tag, usize> = supported(t)
        .into_iter()
        .enumerate()
        .map(|(i, tag)| (tag, i))
        .collect();
    let mut best: Option<(usize, i64, &LockedWheel)> = None;
    let mut offered = Vec::new();
    for wheel in &pkg.wheels {
        let name = parse_name(&wheel.filename)?;
        let build = name
            .build
            .as_deref()
            .map(|b| {
                b.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|d| d.parse::<i64>().ok())
            .unwrap_or(-1);
        for tag in &name.tags {
            offered.push(format!("{}-{}-{}", tag.0, tag.1, tag.2));
        }
        let Some(r) = name.tags.iter().filter_map(|tag| rank.get(tag)).min() else {
            continue;
        };
        let better = match best {
            None => true,
            Some((br, bb, _)) => *r < br || (*r == br && build > bb),
        };
        if better {
            best = Some((*r, build, wheel));
        }
    }
    if let Some((_, _, wheel)) = best {
        return Ok(wheel);
    }
    let needed = supported(t)
        .into_iter()
        .next()
        .map(|(a, b, c)| format!("{a}-{b}-{c}"))
        .unwrap_or_default();
    Err(format!(
        "no wheel of {}{} fits {} (it offers {}; the platform needs e.g. {needed})",
        pkg.name,
        pkg.version
            .as_deref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default(),
        platform_line(t),
        offered.join(", ")
    ))
}

#[cfg(test)]
mod tests;
