//! The `files` kind's `patch.toml`: whole files from the patch folder placed at absolute paths
//! with a mode and an optional owner, and absolute paths to delete. Everything is checked at
//! load, each error naming the file and line, so a bad folder stops the run before any registry
//! is touched.

use serde::Deserialize;

use crate::patch::error::{Error, ErrorKind};
use crate::patch::meta::{absolute, at_line, toml_error};
use crate::patch::source::Source;
use crate::scan::MAX_KEPT_FILE;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
// The shared fields are listed so that unknown ones are refused; `meta::read` reads them.
#[allow(dead_code)]
struct FilesToml {
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
    #[serde(default)]
    delete: Vec<toml::Spanned<String>>,
    #[serde(default)]
    files: Vec<toml::Spanned<FileToml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    path: String,
    source: String,
    mode: i64,
    uid: Option<i64>,
    gid: Option<i64>,
}

/// One file a `files` patch places.
#[derive(Debug, Clone)]
pub struct Placed {
    /// The absolute path as the patch names it, normalized and without its leading `/`.
    pub path: String,
    /// The file's name in the patch folder.
    pub source: String,
    pub content: std::sync::Arc<Vec<u8>>,
    /// Permission bits (`0o7777` at most).
    pub mode: u32,
    pub uid: Option<u64>,
    pub gid: Option<u64>,
}

/// What a `files` patch.toml asks for, checked.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    pub files: Vec<Placed>,
    /// Absolute paths to delete, normalized and without their leading `/`.
    pub delete: Vec<String>,
    /// The bytes of every source file, in order, for the definition digest.
    pub sources: Vec<Vec<u8>>,
}

fn invalid(src: &Source<'_>, at: usize, message: &str) -> Error {
    at_line(src.origin, src.text, at, message)
}

/// Reads one source file from the patch folder.
fn read_source(src: &Source<'_>, at: usize, name: &str) -> Result<Vec<u8>, Error> {
    if name.is_empty() || name.contains('/') || name.contains('\\') || name == ".." {
        return Err(invalid(
            src,
            at,
            &format!("source {name:?} must name a file in the patch folder"),
        ));
    }
    let Some(folder) = src.folder else {
        return Err(invalid(src, at, "a built-in patch cannot carry files"));
    };
    let path = folder.join(name);
    let meta = std::fs::metadata(&path).map_err(|e| {
        let err = invalid(src, at, &format!("cannot read {}: {e}", path.display()));
        Error::new(ErrorKind::Io, err.to_string())
    })?;
    if meta.len() > MAX_KEPT_FILE {
        return Err(invalid(
            src,
            at,
            &format!(
                "{} is {} bytes, more than the {MAX_KEPT_FILE} a placed file may have",
                path.display(),
                meta.len()
            ),
        ));
    }
    std::fs::read(&path).map_err(|e| {
        let err = invalid(src, at, &format!("cannot read {}: {e}", path.display()));
        Error::new(ErrorKind::Io, err.to_string())
    })
}

fn id(src: &Source<'_>, at: usize, what: &str, v: Option<i64>) -> Result<Option<u64>, Error> {
    v.map(|n| {
        u32::try_from(n)
            .map(u64::from)
            .map_err(|_| invalid(src, at, &format!("{what} {n} is not a user or group id")))
    })
    .transpose()
}

/// One `[[files]]` table, checked, with its source read.
fn placed(src: &Source<'_>, t: toml::Spanned<FileToml>) -> Result<Placed, Error> {
    let at = t.span().start;
    let f = t.into_inner();
    let path = absolute(&f.path).map_err(|m| invalid(src, at, &format!("[[files]] path: {m}")))?;
    let mode = u32::try_from(f.mode)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| {
            invalid(
                src,
                at,
                &format!(
                    "[[files]] mode {} is not a permission mode (0o0 to 0o7777; write it as a TOML octal integer, 0o755)",
                    f.mode
                ),
            )
        })?;
    let content = read_source(src, at, &f.source)?;
    Ok(Placed {
        path,
        source: f.source,
        content: std::sync::Arc::new(content),
        mode,
        uid: id(src, at, "uid", f.uid)?,
        gid: id(src, at, "gid", f.gid)?,
    })
}

/// Reads and checks the kind's own fields.
pub fn read(src: &Source<'_>) -> Result<Spec, Error> {
    let t: FilesToml =
        toml::from_str(src.text).map_err(|e| toml_error(src.origin, src.text, &e))?;
    if t.files.is_empty() && t.delete.is_empty() {
        return Err(invalid(
            src,
            0,
            "a files patch places no [[files]] and deletes nothing",
        ));
    }
    let mut spec = Spec::default();
    let mut spans = Vec::new();
    for d in t.delete {
        let at = d.span().start;
        let path = absolute(d.get_ref()).map_err(|m| invalid(src, at, &format!("delete: {m}")))?;
        spans.push((path.clone(), at));
        spec.delete.push(path);
    }
    for f in t.files {
        let at = f.span().start;
        let p = placed(src, f)?;
        spans.push((p.path.clone(), at));
        spec.sources.push(p.content.to_vec());
        spec.files.push(p);
    }
    // Every path once, and none below another: the layer could not hold both.
    for (i, (a, at)) in spans.iter().enumerate() {
        for (b, _) in &spans[..i] {
            if a == b {
                return Err(invalid(src, *at, &format!("/{a} is named twice")));
            }
            let (outer, inner) = if a.len() < b.len() { (a, b) } else { (b, a) };
            if inner.starts_with(&format!("{outer}/")) {
                return Err(invalid(
                    src,
                    *at,
                    &format!("/{inner} lies below /{outer}, which the patch also names"),
                ));
            }
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use crate::patch::meta::absolute;

    #[test]
    fn paths_must_be_absolute_and_normalized() {
        assert_eq!(
            absolute("/etc/ld.so.conf.d/hpcx.conf").as_deref(),
            Ok("etc/ld.so.conf.d/hpcx.conf")
        );
        for bad in [
            "etc/x",
            "/",
            "/etc/",
            "/etc//x",
            "/etc/./x",
            "/etc/../x",
            "/etc/.wh.x",
        ] {
            assert!(absolute(bad).is_err(), "{bad}");
        }
    }
}
