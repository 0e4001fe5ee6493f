//! PEP 751 lock files (`pylock.toml`, lock-version 1.0), as written by hand, `pip lock` or
//! `uv export`: each package's name, version, marker, requires-python and its wheels, each
//! with a sha256. Packages with no wheel (sdist, VCS, directory or archive only) are refused:
//! runner-patch installs wheels only. Every error names the file and line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

/// A parsed lock: its packages in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub packages: Vec<Package>,
    /// The lock's own `requires-python`: an image whose Python it excludes is refused.
    pub requires_python: Option<String>,
}

/// One `[[packages]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// As written.
    pub name: String,
    pub version: Option<String>,
    pub marker: Option<String>,
    pub requires_python: Option<String>,
    pub wheels: Vec<LockedWheel>,
}

/// One locked wheel of a package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedWheel {
    /// The wheel's file name (from `name`, else the url's or path's last segment).
    pub filename: String,
    /// An http(s) URL (a `file:` URL becomes `path`).
    pub url: Option<String>,
    /// Absolute (joined to the lock's folder).
    pub path: Option<PathBuf>,
    /// Lowercase hex.
    pub sha256: String,
    pub size: Option<u64>,
    /// Given as `[packages.archive]` (uv locks a `NAME @ URL` requirement so): a direct URL
    /// install, which leaves `direct_url.json` (PEP 610) as pip and uv do.
    pub direct: bool,
}

/// A lock that cannot be used: "origin:line: what is wrong".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LockError(pub String);

/// The top level of PEP 751 (every key it defines; others are refused; `_` fields are
/// accepted and not used).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawLock {
    lock_version: Spanned<String>,
    #[serde(default)]
    packages: Vec<Spanned<RawPackage>>,
    #[serde(rename = "environments")]
    _environments: Option<IgnoredAny>,
    requires_python: Option<String>,
    #[serde(rename = "extras")]
    _extras: Option<IgnoredAny>,
    #[serde(rename = "dependency-groups")]
    _dependency_groups: Option<IgnoredAny>,
    #[serde(rename = "default-groups")]
    _default_groups: Option<IgnoredAny>,
    #[serde(rename = "created-by")]
    _created_by: Option<IgnoredAny>,
    #[serde(rename = "tool")]
    _tool: Option<IgnoredAny>,
}

/// One `[[packages]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawPackage {
    name: Spanned<String>,
    version: Option<String>,
    marker: Option<String>,
    requires_python: Option<String>,
    #[serde(default)]
    wheels: Vec<Spanned<RawWheel>>,
    #[serde(rename = "sdist")]
    _sdist: Option<IgnoredAny>,
    #[serde(rename = "vcs")]
    _vcs: Option<IgnoredAny>,
    #[serde(rename = "directory")]
    _directory: Option<IgnoredAny>,
    archive: Option<Spanned<RawArchive>>,
    #[serde(rename = "index")]
    _index: Option<IgnoredAny>,
    #[serde(rename = "dependencies")]
    _dependencies: Option<IgnoredAny>,
    #[serde(rename = "attestation-identities")]
    _attestation_identities: Option<IgnoredAny>,
    #[serde(rename = "tool")]
    _tool: Option<IgnoredAny>,
}

/// One `[[packages.wheels]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawWheel {
    name: Option<String>,
    url: Option<String>,
    path: Option<String>,
    size: Option<u64>,
    #[serde(rename = "upload-time")]
    _upload_time: Option<IgnoredAny>,
    hashes: Option<BTreeMap<String, String>>,
}

/// A `[packages.archive]` table: a direct URL or path to one file. A wheel given so (uv locks
/// a `NAME @ https://.../x.whl` requirement this way) is installed as any locked wheel; any
/// other archive (an sdist) is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawArchive {
    url: Option<String>,
    path: Option<String>,
    size: Option<u64>,
    #[serde(rename = "upload-time")]
    _upload_time: Option<IgnoredAny>,
    hashes: Option<BTreeMap<String, String>>,
    subdirectory: Option<String>,
}

impl RawArchive {
    /// The archive as a wheel entry, when it is a wheel file (its name ends in `.whl`).
    fn as_wheel(&self) -> Option<RawWheel> {
        let source = self.url.as_deref().or(self.path.as_deref())?;
        let file = source.split(['#', '?']).next().unwrap_or(source);
        (file.ends_with(".whl") && self.subdirectory.is_none()).then(|| RawWheel {
            name: None,
            url: self.url.clone(),
            path: self.path.clone(),
            size: self.size,
            _upload_time: None,
            hashes: self.hashes.clone(),
        })
    }
}

/// Where a lock is read from, to name lines in errors.
struct At<'a> {
    text: &'a str,
    origin: &'a str,
}

impl At<'_> {
    /// "origin:line: what", the line of byte `offset`.
    fn err(&self, offset: usize, what: impl std::fmt::Display) -> LockError {
        let upto = self.text.get(..offset).unwrap_or(self.text);
        let line = upto.bytes().filter(|b| *b == b'\n').count() + 1;
        LockError(format!("{}:{line}: {what}", self.origin))
    }
}

/// Parses `text` (read from `origin`; wheel paths relative to `folder`).
pub fn parse(text: &str, origin: &str, folder: &Path) -> Result<Lock, LockError> {
    let at = At { text, origin };
    let raw: RawLock = toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0);
        at.err(offset, e.message().trim_end_matches('.').to_owned())
    })?;
    if raw.lock_version.get_ref() != "1.0" {
        return Err(at.err(
            raw.lock_version.span().start,
            format!(
                "lock-version {:?} is not one runner-patch reads (1.0)",
                raw.lock_version.get_ref()
            ),
        ));
    }
    let requires_python = raw.requires_python;
    let packages = raw
        .packages
        .into_iter()
        .map(|p| package(&at, p, folder))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Lock {
        packages,
        requires_python,
    })
}

/// One package: wheels required, each checked.
fn package(at: &At, raw: Spanned<RawPackage>, folder: &Path) -> Result<Package, LockError> {
    let mut raw = raw.into_inner();
    let name = raw.name.get_ref().clone();
    let mut direct = false;
    if raw.wheels.is_empty() {
        if let Some(a) = &raw.archive {
            if let Some(w) = a.get_ref().as_wheel() {
                raw.wheels.push(Spanned::new(a.span(), w));
                direct = true;
            }
        }
    }
    if raw.wheels.is_empty() {
        let has = [
            (raw._sdist.is_some(), "an sdist"),
            (raw._vcs.is_some(), "a VCS source"),
            (raw._directory.is_some(), "a directory"),
            (raw.archive.is_some(), "an archive"),
        ];
        let what = has
            .iter()
            .find(|(b, _)| *b)
            .map(|(_, w)| *w)
            .unwrap_or("nothing to install");
        return Err(at.err(
            raw.name.span().start,
            format!("package {name} has no wheel (only {what}); runner-patch installs wheels only"),
        ));
    }
    let wheels = raw
        .wheels
        .into_iter()
        .map(|w| wheel(at, w, &name, raw.version.as_deref(), folder))
        .map(|w| w.map(|w| LockedWheel { direct, ..w }))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Package {
        name,
        version: raw.version,
        marker: raw.marker,
        requires_python: raw.requires_python,
        wheels,
    })
}

/// One wheel: a source (http(s) or file URL, or a path), a sha256, a file name of the package.
fn wheel(
    at: &At,
    raw: Spanned<RawWheel>,
    package: &str,
    version: Option<&str>,
    folder: &Path,
) -> Result<LockedWheel, LockError> {
    let start = raw.span().start;
    let fail = |what: String| at.err(start, format!("a wheel of {package} {what}"));
    let raw = raw.into_inner();
    let (url, mut path) = match raw.url.as_deref() {
        Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
            (Some(u.to_owned()), None)
        }
        Some(u) if u.starts_with("file://") => (None, Some(file_url(u).map_err(&fail)?)),
        Some(u) => {
            return Err(fail(format!(
                "has url {u:?}, which is neither http(s) nor file"
            )))
        }
        None => (None, None),
    };
    if let Some(p) = raw.path.as_deref() {
        path = Some(folder.join(p));
    }
    let last = |s: &str| s.rsplit(['/', '\\']).next().unwrap_or(s).to_owned();
    let filename = match (&raw.name, raw.url.as_deref(), raw.path.as_deref()) {
        (Some(n), _, _) => n.clone(),
        (None, Some(u), _) => last(u.split(['?', '#']).next().unwrap_or(u)),
        (None, None, Some(p)) => last(p),
        (None, None, None) => return Err(fail("has neither url nor path".to_owned())),
    };
    if url.is_none() && path.is_none() {
        return Err(fail("has neither url nor path".to_owned()));
    }
    let sha256 = raw
        .hashes
        .as_ref()
        .and_then(|h| h.get("sha256"))
        .ok_or_else(|| fail(format!("({filename}) has no sha256 in its hashes")))?
        .to_ascii_lowercase();
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(fail(format!(
            "({filename}) has a sha256 that is not 64 hex digits"
        )));
    }
    belongs(&filename, package, version).map_err(&fail)?;
    Ok(LockedWheel {
        filename,
        url,
        path,
        sha256,
        size: raw.size,
        direct: false,
    })
}

/// The path of a `file://` URL (percent escapes decoded); only local absolute paths.
fn file_url(url: &str) -> Result<PathBuf, String> {
    let rest = url.strip_prefix("file://").unwrap_or(url);
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return Err(format!(
            "has url {url:?}, which is not a local absolute file URL"
        ));
    }
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'%', None) => return Err(format!("has url {url:?} with a bad percent escape")),
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    let path =
        String::from_utf8(out).map_err(|_| format!("has url {url:?}, not UTF-8 once decoded"))?;
    Ok(PathBuf::from(path))
}

/// Whether a wheel file name is one of `package` (and of `version`, when given).
fn belongs(filename: &str, package: &str, version: Option<&str>) -> Result<(), String> {
    use super::requires::normalize;
    let name = super::filename::parse_name(filename)?;
    if normalize(&name.dist) != normalize(package) {
        return Err(format!(
            "is named {filename}, which is a wheel of {}",
            name.dist
        ));
    }
    if let Some(v) = version {
        if !same_version(&name.version, v) {
            return Err(format!(
                "is named {filename}, which is version {} not {v}",
                name.version
            ));
        }
    }
    Ok(())
}

/// PEP 440 equality (`1.0` is `1.0.0`), falling back to the text when either is not PEP 440.
fn same_version(a: &str, b: &str) -> bool {
    use pep508_rs::pep440_rs::Version;
    use std::str::FromStr;
    match (Version::from_str(a), Version::from_str(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests;
