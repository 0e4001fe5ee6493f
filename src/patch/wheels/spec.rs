//! The `wheels` kind's `patch.toml`: the PEP 751 lock to install (`lock`), distributions to
//! uninstall (`remove`), and where to install when the image does not say (`target`,
//! `interpreter`). Checked at load, each error naming the file and line, so a bad folder stops
//! the run before any registry is touched.

use serde::Deserialize;

use super::lock::{self, Lock};
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
    /// The lock's bytes, for the definition digest.
    pub lock_bytes: Vec<u8>,
    /// Distributions to uninstall, PEP 503 normalized.
    pub remove: Vec<String>,
    /// The install dir when the image has none of the distributions, relative to `/`.
    pub target: Option<String>,
    /// The interpreter for shebangs, absolute (`/usr/bin/python3`).
    pub interpreter: Option<String>,
}

fn invalid(src: &Source<'_>, at: usize, message: &str) -> Error {
    at_line(src.origin, src.text, at, message)
}

/// Reads the lock named at `at` from the patch folder.
fn read_lock(src: &Source<'_>, at: usize, name: &str) -> Result<(Vec<u8>, Lock), Error> {
    if name.is_empty() || name.contains('/') || name.contains('\\') || name == ".." {
        return Err(invalid(
            src,
            at,
            &format!("lock {name:?} must name a file in the patch folder"),
        ));
    }
    let Some(folder) = src.folder else {
        return Err(invalid(src, at, "a built-in patch cannot carry a lock"));
    };
    let path = folder.join(name);
    let bytes = std::fs::read(&path).map_err(|e| {
        let err = invalid(src, at, &format!("cannot read {}: {e}", path.display()));
        Error::new(ErrorKind::Io, err.to_string())
    })?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| invalid(src, at, &format!("{} is not UTF-8 text", path.display())))?;
    let lock = lock::parse(text, &path.display().to_string(), folder)
        .map_err(|e| Error::new(ErrorKind::Invalid, e.to_string()))?;
    Ok((bytes, lock))
}

/// Reads and checks the kind's own fields.
pub fn read(src: &Source<'_>) -> Result<Spec, Error> {
    let t: WheelsToml =
        toml::from_str(src.text).map_err(|e| toml_error(src.origin, src.text, &e))?;
    if t.lock.is_none() && t.remove.is_empty() {
        return Err(invalid(
            src,
            0,
            "a wheels patch names no lock and removes nothing",
        ));
    }
    let mut spec = Spec::default();
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
