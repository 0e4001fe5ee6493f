//! The `wheels` kind's `patch.toml`: what to install, either a PEP 751 lock (`lock`) or
//! requirement lines resolved by uv per platform (`requirements`, with uv's index options
//! `index-url`, `extra-index-url`, `find-links`, `no-index`), distributions to uninstall
//! (`remove`), and where to install when the image does not say (`target`, `interpreter`).
//! Checked at load, each error naming the file and line, so a bad folder stops the run before
//! any registry or index is touched.

use serde::Deserialize;

use super::lock::{self, Lock};
use super::requirements::{self, Requirements};
use crate::patch::error::{Error, ErrorKind};
use crate::patch::meta::{absolute, at_line, toml_error};
use crate::patch::source::Source;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
// The shared fields are listed so that unknown ones are refused; `meta::read` reads them.
#[allow(dead_code)]
struct WheelsToml {
    id: toml::Spanned<String>,
    kind: String,
    title: String,
    #[serde(default)]
    services: Vec<String>,
    #[serde(default)]
    backends: Vec<String>,
    package: Option<String>,
    affected: Option<crate::version::VersionRange>,
    mtime: Option<String>,
    lock: Option<toml::Spanned<String>>,
    requirements: Option<toml::Spanned<toml::Value>>,
    #[serde(rename = "index-url")]
    index_url: Option<toml::Spanned<String>>,
    #[serde(rename = "extra-index-url", default)]
    extra_index_url: Vec<toml::Spanned<String>>,
    #[serde(rename = "find-links", default)]
    find_links: Vec<toml::Spanned<String>>,
    #[serde(rename = "no-index")]
    no_index: Option<toml::Spanned<bool>>,
    #[serde(default)]
    remove: Vec<toml::Spanned<String>>,
    target: Option<toml::Spanned<String>>,
    interpreter: Option<toml::Spanned<String>>,
}

/// What a `wheels` patch.toml asks for, checked.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// The lock's file name in the patch folder and what it holds.
    pub lock: Option<(String, Lock)>,
    /// The lock's bytes (or the requirements file's), for the definition digest.
    pub lock_bytes: Vec<u8>,
    /// The requirement lines, when the patch resolves rather than locks.
    pub requirements: Option<Requirements>,
    /// Where uv looks for them; empty: uv's own configuration and environment.
    pub index: IndexOptions,
    /// The patch folder (its lock files, `runner-patch lock`), for a folder patch.
    pub folder: Option<std::path::PathBuf>,
    /// Distributions to uninstall, PEP 503 normalized.
    pub remove: Vec<String>,
    /// The install dir when the image has none of the distributions, relative to `/`.
    pub target: Option<String>,
    /// The interpreter for shebangs, absolute (`/usr/bin/python3`).
    pub interpreter: Option<String>,
}

/// uv's index options, as patch.toml gives them (credentials included: uv gets them; anything
/// shown to people goes through [`redact`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexOptions {
    pub index_url: Option<String>,
    pub extra_index_urls: Vec<String>,
    pub find_links: Vec<String>,
    pub no_index: bool,
}

impl IndexOptions {
    /// Whether the patch gives none (uv's own configuration applies).
    pub fn is_empty(&self) -> bool {
        self == &IndexOptions::default()
    }

    /// uv's command-line options for them, in patch.toml's order.
    pub fn uv_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(u) = &self.index_url {
            out.extend(["--index-url".to_owned(), u.clone()]);
        }
        for u in &self.extra_index_urls {
            out.extend(["--extra-index-url".to_owned(), u.clone()]);
        }
        for u in &self.find_links {
            out.extend(["--find-links".to_owned(), u.clone()]);
        }
        if self.no_index {
            out.push("--no-index".to_owned());
        }
        out
    }

    /// `url` with the credentials of the index option on its scheme, host and port, when one
    /// carries them (uv writes none into what it resolves; fetching a wheel needs them).
    pub fn with_credentials(&self, url: &str) -> String {
        let Ok(mut target) = reqwest::Url::parse(url) else {
            return url.to_owned();
        };
        if !target.username().is_empty() {
            return url.to_owned();
        }
        let all = self
            .index_url
            .iter()
            .chain(&self.extra_index_urls)
            .chain(&self.find_links);
        for option in all.filter_map(|o| reqwest::Url::parse(o).ok()) {
            let same = option.scheme() == target.scheme()
                && option.host_str() == target.host_str()
                && option.port_or_known_default() == target.port_or_known_default();
            if same && !option.username().is_empty() {
                let ok = target.set_username(option.username()).is_ok()
                    && target.set_password(option.password()).is_ok();
                if ok {
                    return target.to_string();
                }
            }
        }
        url.to_owned()
    }

    /// Every URL, credentials redacted, for people and records.
    pub fn shown(&self) -> Vec<String> {
        self.index_url
            .iter()
            .chain(&self.extra_index_urls)
            .chain(&self.find_links)
            .map(|u| redact(u))
            .collect()
    }
}

/// `url` with any `user:password@` replaced by `***@`: what an index URL may show.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***@{}", &url[..scheme_end + 3], &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// Checks an index option's URL: http(s), with a host.
fn check_url(src: &Source<'_>, field: &str, u: &toml::Spanned<String>) -> Result<String, Error> {
    let text = u.get_ref();
    let ok = reqwest::Url::parse(text)
        .is_ok_and(|p| matches!(p.scheme(), "http" | "https") && p.host_str().is_some());
    if !ok {
        return Err(invalid(
            src,
            u.span().start,
            &format!("{field}: {} is not an http(s) URL", redact(text)),
        ));
    }
    Ok(text.clone())
}

fn invalid(src: &Source<'_>, at: usize, message: &str) -> Error {
    at_line(src.origin, src.text, at, message)
}

/// The file `name` (the value of patch.toml's `field`, at `at`) in the patch folder: its path
/// and its text.
fn folder_file(
    src: &Source<'_>,
    at: usize,
    field: &str,
    name: &str,
) -> Result<(std::path::PathBuf, String), Error> {
    if name.is_empty() || name.contains('/') || name.contains('\\') || name == ".." {
        return Err(invalid(
            src,
            at,
            &format!("{field} {name:?} must name a file in the patch folder"),
        ));
    }
    let Some(folder) = src.folder else {
        return Err(invalid(
            src,
            at,
            &format!("a built-in patch cannot carry a {field} file"),
        ));
    };
    let path = folder.join(name);
    let bytes = std::fs::read(&path).map_err(|e| {
        let err = invalid(src, at, &format!("cannot read {}: {e}", path.display()));
        Error::new(ErrorKind::Io, err.to_string())
    })?;
    let text = String::from_utf8(bytes)
        .map_err(|_| invalid(src, at, &format!("{} is not UTF-8 text", path.display())))?;
    Ok((path, text))
}

/// Reads the lock named at `at` from the patch folder.
fn read_lock(src: &Source<'_>, at: usize, name: &str) -> Result<(Vec<u8>, Lock), Error> {
    let (path, text) = folder_file(src, at, "lock", name)?;
    let folder = path.parent().unwrap_or(std::path::Path::new("."));
    let lock = lock::parse(&text, &path.display().to_string(), folder)
        .map_err(|e| Error::new(ErrorKind::Invalid, e.to_string()))?;
    Ok((text.into_bytes(), lock))
}

/// The requirement lines: a list in patch.toml, or the name of a requirements file in the
/// folder (its bytes returned for the definition digest).
fn read_requirements(
    src: &Source<'_>,
    r: &toml::Spanned<toml::Value>,
) -> Result<(Vec<u8>, Requirements), Error> {
    let at = r.span().start;
    let line = src.text[..at.min(src.text.len())].matches('\n').count() + 1;
    let fail = |m: String| Error::new(ErrorKind::Invalid, m);
    match r.get_ref() {
        toml::Value::Array(items) => {
            let mut lines = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let origin = format!("{}:{line}: requirements[{i}]", src.origin);
                let Some(text) = item.as_str() else {
                    return Err(fail(format!("{origin}: is not a string")));
                };
                lines.push(requirements::parse_item(text, &origin).map_err(fail)?);
            }
            if lines.is_empty() {
                return Err(invalid(src, at, "requirements: the list is empty"));
            }
            Ok((Vec::new(), Requirements { file: None, lines }))
        }
        toml::Value::String(name) => {
            let (path, text) = folder_file(src, at, "requirements", name)?;
            let lines =
                requirements::parse_file(&text, &path.display().to_string()).map_err(fail)?;
            Ok((
                text.into_bytes(),
                Requirements {
                    file: Some(name.clone()),
                    lines,
                },
            ))
        }
        _ => Err(invalid(
            src,
            at,
            "requirements is a list of requirement lines or the name of a requirements file",
        )),
    }
}

/// uv's index options; they belong to the requirements route only.
fn index_options(src: &Source<'_>, t: &WheelsToml) -> Result<IndexOptions, Error> {
    let mut o = IndexOptions::default();
    if let Some(u) = &t.index_url {
        o.index_url = Some(check_url(src, "index-url", u)?);
    }
    for u in &t.extra_index_url {
        o.extra_index_urls
            .push(check_url(src, "extra-index-url", u)?);
    }
    for u in &t.find_links {
        o.find_links.push(check_url(src, "find-links", u)?);
    }
    if let Some(n) = &t.no_index {
        o.no_index = *n.get_ref();
        if o.no_index && (o.index_url.is_some() || !o.extra_index_urls.is_empty()) {
            return Err(invalid(
                src,
                n.span().start,
                "no-index = true leaves index-url and extra-index-url unused; give one or the other",
            ));
        }
    }
    if t.requirements.is_none() && !o.is_empty() {
        let at = t
            .index_url
            .as_ref()
            .map(|u| u.span().start)
            .or(t.extra_index_url.first().map(|u| u.span().start))
            .or(t.find_links.first().map(|u| u.span().start))
            .or(t.no_index.as_ref().map(|n| n.span().start))
            .unwrap_or(0);
        return Err(invalid(
            src,
            at,
            "index options apply to requirements only (a lock names its wheels itself)",
        ));
    }
    Ok(o)
}

/// Reads and checks the kind's own fields.
pub fn read(src: &Source<'_>) -> Result<Spec, Error> {
    let t: WheelsToml =
        toml::from_str(src.text).map_err(|e| toml_error(src.origin, src.text, &e))?;
    if t.lock.is_none() && t.requirements.is_none() && t.remove.is_empty() {
        return Err(invalid(
            src,
            0,
            "a wheels patch names no lock and removes nothing (give `lock` or `requirements`, or `remove`)",
        ));
    }
    if let (Some(_), Some(r)) = (&t.lock, &t.requirements) {
        return Err(invalid(
            src,
            r.span().start,
            "lock and requirements are two routes to one install; name one of them",
        ));
    }
    let mut spec = Spec {
        folder: src.folder.map(std::path::Path::to_path_buf),
        ..Spec::default()
    };
    if let Some(r) = &t.requirements {
        let (bytes, reqs) = read_requirements(src, r)?;
        spec.lock_bytes = bytes;
        spec.requirements = Some(reqs);
    }
    spec.index = index_options(src, &t)?;
    if let Some(l) = &t.lock {
        let (bytes, lock) = read_lock(src, l.span().start, l.get_ref())?;
        spec.lock_bytes = bytes;
        spec.lock = Some((l.get_ref().clone(), lock));
    }
    for r in &t.remove {
        let name = super::requires::normalize(r.get_ref());
        let ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
        if !ok {
            return Err(invalid(
                src,
                r.span().start,
                &format!("remove: {:?} is not a distribution name", r.get_ref()),
            ));
        }
        if spec.remove.contains(&name) {
            return Err(invalid(
                src,
                r.span().start,
                &format!("remove: {name} is named twice"),
            ));
        }
        spec.remove.push(name);
    }
    if let Some(t) = &t.target {
        let p = absolute(t.get_ref())
            .map_err(|m| invalid(src, t.span().start, &format!("target: {m}")))?;
        spec.target = Some(p);
    }
    if let Some(i) = &t.interpreter {
        absolute(i.get_ref())
            .map_err(|m| invalid(src, i.span().start, &format!("interpreter: {m}")))?;
        spec.interpreter = Some(i.get_ref().clone());
    }
    Ok(spec)
}

#[cfg(test)]
mod tests;
