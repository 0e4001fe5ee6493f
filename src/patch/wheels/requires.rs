//! What a distribution's `METADATA` requires and whether an image meets it: the headers the
//! checks read, PEP 503 names, markers and specifiers (PEP 508 / PEP 440, evaluated for the
//! target platform with no extras, as pip does), the check pip makes before it installs and
//! the one `pip check` makes after.

use std::collections::BTreeMap;
use std::str::FromStr;

use pep508_rs::pep440_rs::{Version, VersionSpecifiers};
use pep508_rs::{
    MarkerEnvironment, MarkerEnvironmentBuilder, MarkerTree, Requirement, VersionOrUrl,
};

use super::target::Target;

/// The parts of a dist's `METADATA` the checks use, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub name: String,
    pub version: String,
    pub requires_dist: Vec<String>,
    pub requires_python: Option<String>,
}

/// Parses `METADATA` (RFC 822 headers up to the first blank line, continuation lines joined);
/// `Name` and `Version` are required.
pub fn parse_metadata(bytes: &[u8]) -> Result<Metadata, String> {
    let head = header_block(bytes);
    let head = std::str::from_utf8(head).map_err(|_| "METADATA is not UTF-8".to_owned())?;
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in head.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.starts_with([' ', '\t']) {
            match fields.last_mut() {
                Some((_, v)) => {
                    v.push(' ');
                    v.push_str(line.trim());
                }
                None => {
                    return Err(format!(
                        "METADATA starts with a continuation line: {line:?}"
                    ))
                }
            }
        } else if let Some((k, v)) = line.split_once(':') {
            fields.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        } else {
            return Err(format!(
                "METADATA has a header line without a colon: {line:?}"
            ));
        }
    }
    let first = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
    let name = first("name").filter(|n| !n.is_empty());
    let version = first("version").filter(|v| !v.is_empty());
    let (Some(name), Some(version)) = (name, version) else {
        return Err("METADATA lacks a Name or a Version header".to_owned());
    };
    Ok(Metadata {
        name,
        version,
        requires_dist: fields
            .iter()
            .filter(|(k, _)| k == "requires-dist")
            .map(|(_, v)| v.clone())
            .collect(),
        requires_python: first("requires-python").filter(|v| !v.is_empty()),
    })
}

/// The bytes before the first empty line (the body is the description).
fn header_block(bytes: &[u8]) -> &[u8] {
    let mut start = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'\n' {
            let line = &bytes[start..i];
            if line.is_empty() || line == b"\r" {
                return &bytes[..start];
            }
            start = i + 1;
        }
    }
    bytes
}

/// PEP 503 normalized name: lower case, each run of `-`, `_`, `.` one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.trim().chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// The first line of a parser's (multi-line) message.
fn first_line(e: impl std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or("").trim().to_owned()
}

/// The marker environment of CPython on Linux for `t`.
fn environment(t: &Target) -> Result<MarkerEnvironment, String> {
    let python_version = format!("{}.{}", t.python.0, t.python.1);
    MarkerEnvironment::try_from(MarkerEnvironmentBuilder {
        implementation_name: "cpython",
        implementation_version: &t.python_full,
        os_name: "posix",
        platform_machine: &t.arch,
        platform_python_implementation: "CPython",
        platform_release: "",
        platform_system: "Linux",
        platform_version: "",
        python_full_version: &t.python_full,
        python_version: &python_version,
        sys_platform: "linux",
    })
    .map_err(|e| {
        format!(
            "Python version {} cannot be read: {}",
            t.python_full,
            first_line(e)
        )
    })
}

/// Whether a package marker (none: always) applies to `t`, with no extras.
pub fn applies(marker: Option<&str>, t: &Target) -> Result<bool, String> {
    let Some(marker) = marker.map(str::trim).filter(|m| !m.is_empty()) else {
        return Ok(true);
    };
    let tree = MarkerTree::from_str(marker).map_err(|e| {
        if marker.contains("dependency_groups") || marker.contains("extras") {
            format!(
                "marker {marker:?} selects by the lock's extras or dependency groups, which \
                 runner-patch does not choose from; write the lock for one set of them"
            )
        } else {
            format!("marker {marker:?} cannot be read: {}", first_line(e))
        }
    })?;
    Ok(tree.evaluate(&environment(t)?, &[]))
}

/// Whether `t`'s Python (its full version) meets a `Requires-Python` specifier set.
pub fn python_ok(requires_python: &str, t: &Target) -> Result<bool, String> {
    let spec = VersionSpecifiers::from_str(requires_python.trim()).map_err(|e| {
        format!(
            "requires-python {requires_python:?} cannot be read: {}",
            first_line(e)
        )
    })?;
    let version = Version::from_str(&t.python_full).map_err(|e| {
        format!(
            "Python version {} cannot be read: {}",
            t.python_full,
            first_line(e)
        )
    })?;
    Ok(spec.contains(&version))
}

/// What one requirement finds among the distributions it is checked against.
enum Unmet<'a> {
    /// No distribution of that name.
    Absent(String),
    /// One whose version the specifiers exclude (or that is not a PEP 440 version).
    Conflict(&'a Metadata),
}

/// Distributions by normalized name.
fn by_name(dists: &[Metadata]) -> BTreeMap<String, &Metadata> {
    dists.iter().map(|d| (normalize(&d.name), d)).collect()
}

/// `req` checked against `have` for `env` (pip's rule: markers with no extras; prereleases
/// count): `None` when met or when the marker excludes it.
fn unmet<'a>(
    req: &Requirement,
    env: &MarkerEnvironment,
    have: &BTreeMap<String, &'a Metadata>,
) -> Option<Unmet<'a>> {
    if !req.marker.evaluate(env, &[]) {
        return None;
    }
    let name = normalize(req.name.as_ref());
    let Some(dist) = have.get(&name) else {
        return Some(Unmet::Absent(name));
    };
    match &req.version_or_url {
        Some(VersionOrUrl::VersionSpecifier(spec)) => match Version::from_str(&dist.version) {
            Ok(v) if spec.contains(&v) => None,
            _ => Some(Unmet::Conflict(dist)),
        },
        _ => None,
    }
}

/// A requirement as `pip check` prints it: name as written, sorted extras, sorted specifiers joined by
/// `,`, and `; marker` as written.
fn shown(req: &Requirement, raw: &str) -> String {
    let mut out: String = raw
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .collect();
    if !req.extras.is_empty() {
        let mut extras: Vec<String> = req.extras.iter().map(|e| e.to_string()).collect();
        extras.sort();
        out.push_str(&format!("[{}]", extras.join(",")));
    }
    match &req.version_or_url {
        Some(VersionOrUrl::VersionSpecifier(spec)) => {
            let mut parts: Vec<String> = spec.iter().map(|s| s.to_string()).collect();
            parts.sort();
            out.push_str(&parts.join(","));
        }
        Some(VersionOrUrl::Url(url)) => out.push_str(&format!(" @ {url}")),
        None => {}
    }
    if let Some((_, marker)) = raw.split_once(';') {
        out.push_str(&format!("; {}", marker_text(marker)));
    }
    out
}

/// A marker as `packaging` prints it: tokens one space apart (none inside parentheses),
/// strings in double quotes.
fn marker_text(raw: &str) -> String {
    let mut tokens: Vec<String> = Vec::new();
    let mut chars = raw.trim().chars().peekable();
    while let Some(c) = chars.next() {
        let kind = |c: char| {
            if c.is_alphanumeric() || c == '_' || c == '.' {
                1
            } else if "<>=!~".contains(c) {
                2
            } else {
                0
            }
        };
        match c {
            c if c.is_whitespace() => {}
            '(' | ')' => tokens.push(c.to_string()),
            '\'' | '"' => {
                let text: String = chars.by_ref().take_while(|d| *d != c).collect();
                tokens.push(format!("\"{text}\""));
            }
            c => {
                let mut word = c.to_string();
                while let Some(d) = chars.next_if(|d| kind(*d) == kind(c) && kind(c) != 0) {
                    word.push(d);
                }
                tokens.push(word);
            }
        }
    }
    let mut out = String::new();
    for (i, t) in tokens.iter().enumerate() {
        let glued = i == 0 || t == ")" || tokens[i - 1] == "(";
        if !glued {
            out.push(' ');
        }
        out.push_str(t);
    }
    out
}

/// Unmet Requires-Dist of `new` (markers evaluated for `t`, no extras) against `after` (what the
/// image has once the change is made, new ones included): one line each, naming both sides.
pub fn missing(new: &[Metadata], after: &[Metadata], t: &Target) -> Vec<String> {
    let env = match environment(t) {
        Ok(env) => env,
        Err(e) => return vec![e],
    };
    let have = by_name(after);
    let mut out = Vec::new();
    for dist in new {
        for raw in &dist.requires_dist {
            let who = format!("{} {}", dist.name, dist.version);
            let req = match Requirement::from_str(raw) {
                Ok(req) => req,
                Err(e) => {
                    out.push(format!(
                        "{who} has a Requires-Dist that cannot be read ({raw:?}): {}",
                        first_line(e)
                    ));
                    continue;
                }
            };
            match unmet(&req, &env, &have) {
                None => {}
                Some(Unmet::Absent(_)) => out.push(format!(
                    "{who} requires {}, which is neither installed nor locked",
                    raw.trim()
                )),
                Some(Unmet::Conflict(d)) => out.push(format!(
                    "{who} requires {}, but the image would have {} {}",
                    raw.trim(),
                    d.name,
                    d.version
                )),
            }
        }
    }
    out
}

/// A version in its normal PEP 440 form (`2.0-rc1` is `2.0rc1`), as written when it is not one.
fn pep440(version: &str) -> String {
    Version::from_str(version).map_or_else(|_| version.to_owned(), |v| v.to_string())
}

/// `pip check`'s lines for `dist` against `have` (unreadable requirements skipped, as they
/// are not this change's doing).
fn check(
    dist: &Metadata,
    have: &BTreeMap<String, &Metadata>,
    env: &MarkerEnvironment,
) -> Vec<String> {
    let who = format!("{} {}", normalize(&dist.name), pep440(&dist.version));
    let mut out = Vec::new();
    for raw in &dist.requires_dist {
        let Ok(req) = Requirement::from_str(raw) else {
            continue;
        };
        match unmet(&req, env, have) {
            None => {}
            Some(Unmet::Absent(name)) => {
                out.push(format!("{who} requires {name}, which is not installed."))
            }
            Some(Unmet::Conflict(d)) => out.push(format!(
                "{who} has requirement {}, but you have {} {}.",
                shown(&req, raw),
                normalize(&d.name),
                pep440(&d.version)
            )),
        }
    }
    out
}

/// pip check: installed dists (in `after`, not in `new`) whose requirements `after` no longer
/// meets but `before` did. One line each, worded like pip check.
pub fn broken(
    new: &[Metadata],
    before: &[Metadata],
    after: &[Metadata],
    t: &Target,
) -> Vec<String> {
    let Ok(env) = environment(t) else {
        return Vec::new();
    };
    let fresh: Vec<String> = new.iter().map(|d| normalize(&d.name)).collect();
    let (had, has) = (by_name(before), by_name(after));
    let mut out = Vec::new();
    for dist in after {
        if fresh.contains(&normalize(&dist.name)) {
            continue;
        }
        let was = check(dist, &had, &env);
        out.extend(
            check(dist, &has, &env)
                .into_iter()
                .filter(|l| !was.contains(l)),
        );
    }
    out
}

#[cfg(test)]
mod tests;
