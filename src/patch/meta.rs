//! What every patch declares beside its kind's own fields (the `patch.toml` contract: id,
//! title, services, backends, package, affected, mtime), the checks they share, and the errors
//! that name a patch folder's file and line.

use serde::Deserialize;

use crate::patch::error::{Error, ErrorKind};
use crate::patch::source::Source;
use crate::scan::FileEntry;
use crate::version::VersionRange;

/// Default mtime of files written by patches that set none: fixed, so the same patch gives the
/// same layer.
pub const DEFAULT_MTIME: &str = "2000-01-01T00:00:00Z";

/// The fields every patch shares.
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    /// The kind's name as `patch.toml` spells it (`shapes`, `diff`, `env`, ...).
    pub kind: &'static str,
    pub title: String,
    /// Services named in the tag (`vllm`, `sglang`, ...); empty means all.
    pub services: Vec<String>,
    /// Backends (`cuda`, `rocm`, `cann`); empty means all.
    pub backends: Vec<String>,
    /// The Python package a patch is about and whose version `affected` tests.
    pub package: Option<String>,
    pub affected: Option<VersionRange>,
    /// RFC 3339 mtime given to written files, as written (history entries name it).
    pub mtime: String,
    /// The same time in Unix seconds, parsed once at load.
    pub mtime_secs: u64,
    /// The `patch.toml` it came from (built-in: `patches/<id>/patch.toml`).
    pub origin: String,
    /// sha256 of the patch's definition (`patch.toml` and the files it names), for the
    /// provenance statement.
    pub definition_digest: String,
}

impl Meta {
    /// Whether a tag of this service and backend is one this patch is for (discovery).
    pub fn selects(&self, service: &str, backend: &str) -> bool {
        self.for_service(service) && self.for_backend(backend)
    }

    /// Whether this patch is for the service a tag names (an empty list: every service).
    pub fn for_service(&self, service: &str) -> bool {
        self.services.is_empty() || self.services.iter().any(|s| s == service)
    }

    /// Whether this patch is for the backend a tag names (an empty list: every backend).
    pub fn for_backend(&self, backend: &str) -> bool {
        self.backends.is_empty() || self.backends.iter().any(|b| b == backend)
    }

    /// The package and versions the patch is for, as `runner-patch patches` lists it.
    pub fn affected_text(&self) -> String {
        match (&self.package, &self.affected) {
            (Some(pkg), Some(r)) => format!("{pkg} {r}"),
            (Some(pkg), None) => format!("{pkg} (any version)"),
            _ => "any version".to_owned(),
        }
    }

    /// The mtime for a file this patch rewrites: its own time, moved by a second if the
    /// original had exactly that time, so a timestamp-checked `.pyc` can never match it.
    pub fn mtime_replacing(&self, original: &FileEntry) -> u64 {
        if self.mtime_secs == original.mtime {
            self.mtime_secs + 1
        } else {
            self.mtime_secs
        }
    }
}

/// The shared fields as any kind's `patch.toml` holds them; each kind reads its own fields
/// (and rejects unknown ones) itself.
#[derive(Deserialize)]
struct CommonToml {
    id: toml::Spanned<String>,
    title: String,
    #[serde(default)]
    services: Vec<String>,
    #[serde(default)]
    backends: Vec<String>,
    package: Option<String>,
    affected: Option<VersionRange>,
    mtime: Option<String>,
}

/// Reads and checks the fields every kind shares from a `patch.toml` of kind `kind`.
pub fn read(src: &Source<'_>, kind: &'static str) -> Result<Meta, Error> {
    let t: CommonToml =
        toml::from_str(src.text).map_err(|e| toml_error(src.origin, src.text, &e))?;
    let mut meta = Common {
        text: src.text,
        origin: src.origin,
        id: &t.id,
        kind,
        title: t.title,
        services: t.services,
        backends: t.backends,
        package: t.package,
        affected: t.affected,
        mtime: t.mtime,
    }
    .into_meta()?;
    meta.definition_digest = src.definition_digest(&[]);
    Ok(meta)
}

/// The fields every kind's `patch.toml` holds, as read.
pub struct Common<'a> {
    pub text: &'a str,
    pub origin: &'a str,
    pub id: &'a toml::Spanned<String>,
    pub kind: &'static str,
    pub title: String,
    pub services: Vec<String>,
    pub backends: Vec<String>,
    pub package: Option<String>,
    pub affected: Option<VersionRange>,
    pub mtime: Option<String>,
}

impl Common<'_> {
    /// Checks the shared fields and makes the [`Meta`] (its definition digest is set by the
    /// loader, which knows every file the patch reads).
    pub fn into_meta(self) -> Result<Meta, Error> {
        check_id(self.origin, self.text, self.id)?;
        for b in &self.backends {
            if !matches!(b.as_str(), "cuda" | "rocm" | "cann") {
                return Err(invalid(format!(
                    "{}: backends: unknown backend {b:?} (expected cuda, rocm or cann)",
                    self.origin
                )));
            }
        }
        for s in &self.services {
            let ok = !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !ok {
                return Err(invalid(format!("{}: services: {s:?} is not a service name as tags spell it (vllm, sglang, ...)", self.origin)));
            }
        }
        let mtime = self.mtime.unwrap_or_else(|| DEFAULT_MTIME.to_owned());
        let mtime_secs =
            parse_rfc3339(&mtime).map_err(|e| invalid(format!("{}: mtime: {e}", self.origin)))?;
        Ok(Meta {
            id: self.id.get_ref().clone(),
            kind: self.kind,
            title: self.title,
            services: self.services,
            backends: self.backends,
            package: self.package,
            affected: self.affected,
            mtime,
            mtime_secs,
            origin: self.origin.to_owned(),
            definition_digest: String::new(),
        })
    }
}

fn check_id(origin: &str, text: &str, id: &toml::Spanned<String>) -> Result<(), Error> {
    let ok = !id.get_ref().is_empty()
        && id
            .get_ref()
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if ok {
        return Ok(());
    }
    Err(at_line(
        origin,
        text,
        id.span().start,
        &format!(
            "id {:?} must be lowercase letters, digits, '-' or '.' (it goes into a config label)",
            id.get_ref()
        ),
    ))
}

/// An absolute path as a patch may name it (`/`, then components that are not empty, `.`,
/// `..` or whiteout names), returned without its leading `/`; `Err` says what is wrong.
pub fn absolute(path: &str) -> Result<String, String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("{path:?} is not an absolute path"));
    };
    if rest.is_empty() || rest.ends_with('/') || path.contains('\0') {
        return Err(format!("{path:?} does not name a path below /"));
    }
    for part in rest.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(format!(
                "{path:?} is not a normalized path (empty, `.` or `..` component)"
            ));
        }
        if part.starts_with(".wh.") {
            return Err(format!("{path:?} names a whiteout (.wh.)"));
        }
    }
    Ok(rest.to_owned())
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::Invalid, message)
}

/// An error in a patch folder's file, named by file and line (`origin:line: message`).
pub fn at_line(origin: &str, text: &str, offset: usize, message: &str) -> Error {
    let line = text[..offset.min(text.len())].matches('\n').count() + 1;
    Error::new(ErrorKind::Invalid, format!("{origin}:{line}: {message}"))
}

/// A TOML error as `file:line: message`.
pub fn toml_error(origin: &str, text: &str, e: &toml::de::Error) -> Error {
    let message = match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("{origin}:{line}: {}", e.message().trim())
        }
        None => format!("{origin}: {}", e.message().trim()),
    };
    Error::new(ErrorKind::Syntax, message)
}

/// Parses an RFC 3339 time into Unix seconds.
pub fn parse_rfc3339(s: &str) -> Result<u64, Error> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| invalid(format!("{s:?} is not an RFC 3339 time: {e}")))?;
    u64::try_from(t.unix_timestamp()).map_err(|_| invalid(format!("{s:?} is before 1970")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::EntryKind;

    #[test]
    fn mtime_always_changes() {
        let id = toml::Spanned::new(0..1, "p".to_owned());
        let meta = |t: &str| {
            Common {
                text: "",
                origin: "p/patch.toml",
                id: &id,
                kind: "env",
                title: String::new(),
                services: Vec::new(),
                backends: Vec::new(),
                package: None,
                affected: None,
                mtime: Some(t.to_owned()),
            }
            .into_meta()
            .expect("meta")
        };
        let e = FileEntry {
            path: "x.py".into(),
            kind: EntryKind::Regular,
            mode: 0o644,
            uid: 0,
            gid: 0,
            uname: None,
            gname: None,
            mtime: 1_700_000_000,
            content: b"old".to_vec().into(),
        };
        let same = meta("2023-11-14T22:13:20Z");
        assert_eq!(same.mtime_secs, e.mtime);
        assert_eq!(same.mtime_replacing(&e), e.mtime + 1);
        assert_eq!(meta("1970-01-01T00:00:05Z").mtime_replacing(&e), 5);
    }
}
