//! The `diff` kind: a unified diff (git or GNU format, several files) applied relative to the
//! root of a Python package found in the image: the directory that holds `<package>/`
//! (`.../dist-packages`, `.../site-packages`, an editable checkout), found from what the image
//! shows, not guessed from one layout; or relative to an absolute directory (`root`, as `patch
//! -p1` run there takes it, symbolic links followed as the container does: `root.rs`). Every
//! file must apply (patched) or every file must reverse-apply (already patched); anything else
//! is refused, so a half-applied diff is never completed by guessing.

use serde::Deserialize;
use serde_json::json;

mod root;
pub mod unified;

use crate::patch::error::{Error, ErrorKind};
use crate::patch::kind::{Description, Patch, PatchKind};
use crate::patch::meta::{self, at_line, toml_error, Meta};
use crate::patch::source::Source;
use crate::patch::tree::{join, Tree};
use crate::patch::verdict::{Change, Verdict};
use crate::scan::{EntryKind, FileEntry};
use unified::FileDiff;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
// The shared fields are listed so that unknown ones are refused; `meta::read` reads them.
#[allow(dead_code)]
struct DiffToml {
    id: toml::Spanned<String>,
    kind: String,
    title: String,
    #[serde(default)]
    services: Vec<String>,
    #[serde(default)]
    backends: Vec<String>,
    package: Option<toml::Spanned<String>>,
    root: Option<toml::Spanned<String>>,
    affected: Option<toml::Spanned<crate::version::VersionRange>>,
    diff: toml::Spanned<String>,
    mtime: Option<String>,
}

/// A `diff` patch: its parsed files, in diff order.
#[derive(Debug, Clone)]
pub struct DiffPatch {
    pub meta: Meta,
    /// The package whose root the diff is relative to (empty with `root`).
    pub package: String,
    /// The absolute directory the diff is relative to instead (without its leading `/`).
    pub root: Option<String>,
    /// The diff file's name in the patch folder.
    pub diff_name: String,
    pub files: Vec<FileDiff>,
}

/// Loads the patch.toml and parses its diff now, so a bad diff stops the run before any
/// registry is touched, naming the diff file and line.
pub fn load(src: &Source<'_>) -> Result<Patch, Error> {
    DiffPatch::load(src).map(Patch::new)
}

/// The package name a diff is relative to, checked.
fn package_name(src: &Source<'_>, package: &toml::Spanned<String>) -> Result<String, Error> {
    let name = package.get_ref().clone();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(at_line(
            src.origin,
            src.text,
            package.span().start,
            &format!("package {name:?} is not an importable Python package name"),
        ));
    }
    Ok(name)
}

/// The diff file a patch.toml names, read from its folder: (name, bytes).
fn read_diff(src: &Source<'_>, diff: &toml::Spanned<String>) -> Result<(String, Vec<u8>), Error> {
    let (origin, text) = (src.origin, src.text);
    let at = diff.span().start;
    let name = diff.get_ref().clone();
    if name.is_empty() || name.contains('/') || name.contains('\\') || name == ".." {
        return Err(at_line(
            origin,
            text,
            at,
            &format!("diff {name:?} must name a file in the patch folder"),
        ));
    }
    let Some(folder) = src.folder else {
        return Err(at_line(
            origin,
            text,
            at,
            "a built-in patch cannot carry a diff file",
        ));
    };
    let path = folder.join(&name);
    let bytes = std::fs::read(&path).map_err(|e| {
        let err = at_line(
            origin,
            text,
            at,
            &format!("cannot read diff {}: {e}", path.display()),
        );
        Error::new(ErrorKind::Io, err.to_string())
    })?;
    Ok((name, bytes))
}

impl DiffPatch {
    fn load(src: &Source<'_>) -> Result<Self, Error> {
        let (text, origin) = (src.text, src.origin);
        let t: DiffToml = toml::from_str(text).map_err(|e| toml_error(origin, text, &e))?;
        let mut meta = meta::read(src, "diff")?;
        let (package, root) = match (&t.package, &t.root) {
            (Some(p), None) => (package_name(src, p)?, None),
            (None, Some(r)) => (String::new(), Some(root::read(src, r, t.affected.as_ref())?)),
            (Some(p), Some(_)) => {
                return Err(at_line(
                    origin,
                    text,
                    p.span().start,
                    "a diff is relative to a package or to a root directory, not both",
                ))
            }
            (None, None) => {
                return Err(at_line(
                    origin,
                    text,
                    0,
                    "a diff needs `package` (the Python package its paths start in) or `root` (the absolute directory they are relative to)",
                ))
            }
        };
        let (diff_name, bytes) = read_diff(src, &t.diff)?;
        let path = src.folder.map(|f| f.join(&diff_name)).unwrap_or_default();
        let files = unified::parse(&bytes).map_err(|e| {
            Error::new(
                ErrorKind::Syntax,
                format!("{}:{}: {}", path.display(), e.line, e.message),
            )
        })?;
        for f in files.iter().filter(|_| root.is_none()) {
            if !f.path().starts_with(&format!("{package}/")) {
                return Err(Error::new(ErrorKind::Invalid, format!(
                    "{}:{}: {} is not under {package}/ (paths are relative to the directory that holds the package)",
                    path.display(),
                    f.line,
                    f.path()
                )));
            }
        }
        if root.is_none() {
            meta.package = Some(package.clone());
        }
        meta.definition_digest = src.definition_digest(&[&bytes]);
        Ok(DiffPatch {
            meta,
            package,
            root,
            diff_name,
            files,
        })
    }

    /// The files whose visible copy fixes the package root: those the diff changes or deletes,
    /// else the package's `__init__.py`.
    fn anchor(&self) -> String {
        self.files.iter().find(|f| !f.creates()).map_or_else(
            || format!("{}/__init__.py", self.package),
            |f| f.path().to_owned(),
        )
    }

    /// The one root the anchor is visible under; else the verdict that ends the decision.
    fn root(&self, tree: &dyn Tree) -> Result<String, Box<Verdict>> {
        let anchor = self.anchor();
        let roots: Vec<String> = tree
            .find(&anchor)
            .iter()
            .map(|p| {
                p.strip_suffix(anchor.as_str())
                    .unwrap_or("")
                    .trim_end_matches('/')
                    .to_owned()
            })
            .collect();
        match roots.as_slice() {
            [] => {
                let init = format!("{}/__init__.py", self.package);
                Err(Box::new(if tree.find(&init).is_empty() {
                    Verdict::not_affected(format!(
                        "no package {} here (no visible **/{init})",
                        self.package
                    ))
                } else {
                    Verdict::refused(format!(
                        "no visible **/{anchor}: the diff does not fit this {} package",
                        self.package
                    ))
                }))
            }
            [one] => Ok(one.clone()),
            many => Err(Box::new(Verdict::refused(format!(
                "{} roots hold **/{anchor} (/{}); refusing to guess which one runs",
                many.len(),
                many.join(", /")
            )))),
        }
    }

    /// `Err(not affected)` when the package's version at `root` is outside `affected`.
    fn in_range(&self, root: &str, version: Option<&String>) -> Result<(), Box<Verdict>> {
        let (Some(v), Some(range)) = (version, &self.meta.affected) else {
            return Ok(());
        };
        match crate::version::Version::parse(v) {
            Some(parsed) if !range.contains(&parsed) => {
                Err(Box::new(Verdict::not_affected(format!(
                    "{} {v} at /{root} is outside the affected range {range}",
                    self.package
                ))))
            }
            _ => Ok(()),
        }
    }
}

/// What one file of the diff does to the tree.
enum Step {
    Apply {
        new: Option<Vec<u8>>,
        placed: Vec<unified::Placed>,
    },
    Already,
}

/// Decides one file: forward, else reverse (already applied), else a reason to refuse.
fn decide_file(fd: &FileDiff, current: Option<&[u8]>) -> Result<Step, String> {
    let path = fd.path();
    match (current, fd.creates(), fd.deletes()) {
        (None, true, _) => {
            let (new, placed) = unified::apply(b"", fd).map_err(|m| format!("{path}: {m}"))?;
            Ok(Step::Apply {
                new: Some(new),
                placed,
            })
        }
        (Some(cur), true, _) => match unified::apply(cur, &fd.reversed()) {
            Ok((rest, _)) if rest.is_empty() => Ok(Step::Already),
            _ => Err(format!(
                "{path} is created by the diff but already exists with other content"
            )),
        },
        (None, false, true) => Ok(Step::Already),
        (None, false, false) => Err(format!("{path} does not exist under the root")),
        (Some(cur), false, deletes) => match unified::apply(cur, fd) {
            Ok((new, placed)) => {
                if deletes && !new.is_empty() {
                    return Err(format!(
                        "{path} is deleted by the diff but holds more than the diff removes"
                    ));
                }
                Ok(Step::Apply {
                    new: (!deletes).then_some(new),
                    placed,
                })
            }
            Err(m) => match unified::apply(cur, &fd.reversed()) {
                Ok(_) if !deletes => Ok(Step::Already),
                _ => Err(format!("{path}: {m} (refused: no fuzz)")),
            },
        },
    }
}

/// The visible entry at `path`, which must be a regular file if it exists.
fn regular_or_absent(tree: &dyn Tree, path: &str) -> Result<Option<FileEntry>, String> {
    let entry = tree.file(path).map_err(|e| e.to_string())?;
    if let Some(e) = &entry {
        match &e.kind {
            EntryKind::Regular => {}
            EntryKind::Symlink(to) | EntryKind::Hardlink(to) => {
                return Err(format!(
                    "/{path} is a link to {to:?}; links are refused, not followed"
                ))
            }
            EntryKind::Other(k) => {
                return Err(format!("/{path} is a {k} entry, not a regular file"))
            }
        }
    }
    Ok(entry)
}

/// What applying every file of the diff under one root found: the changes, notes, and which
/// files applied and which already carried the change.
#[derive(Default)]
struct Applied {
    changes: Vec<Change>,
    notes: Vec<String>,
    applied: Vec<String>,
    already: Vec<String>,
}

impl DiffPatch {
    /// The change one applied file makes: its new bytes over the original header (a created
    /// file is 0644 root:root), or a whiteout for a deleted one; then its stale bytecode.
    fn change(&self, path: &str, new: Option<Vec<u8>>, entry: Option<FileEntry>) -> Change {
        match (new, entry) {
            (None, _) => Change::Whiteout(path.to_owned()),
            (Some(bytes), Some(orig)) => Change::Write(FileEntry {
                mtime: self.meta.mtime_replacing(&orig),
                content: std::sync::Arc::new(bytes),
                ..orig
            }),
            (Some(bytes), None) => Change::Write(FileEntry::created(
                path.to_owned(),
                bytes,
                0o644,
                self.meta.mtime_secs,
            )),
        }
    }

    /// Applies every file of the diff under `root`, each at the real path `real` gives for its
    /// path in the diff; `Err` names the first that cannot apply.
    fn apply_all(
        &self,
        tree: &dyn Tree,
        root: &str,
        real: &dyn Fn(&str) -> Result<String, String>,
    ) -> Result<Applied, String> {
        let mut out = Applied::default();
        for fd in &self.files {
            let path = real(fd.path())?;
            let entry = regular_or_absent(tree, &path)?;
            let step = decide_file(fd, entry.as_ref().map(|e| e.content.as_slice()))
                .map_err(|reason| format!("/{root}: {reason}"))?;
            let Step::Apply { new, placed } = step else {
                out.already.push(fd.path().to_owned());
                continue;
            };
            out.applied.push(fd.path().to_owned());
            for p in placed.iter().filter(|p| p.offset != 0) {
                out.notes.push(format!(
                    "{}: hunk #{} applied at offset {:+} lines",
                    fd.path(),
                    p.hunk,
                    p.offset
                ));
            }
            out.changes.push(self.change(&path, new, entry));
            out.changes
                .extend(tree.stale_bytecode(&path).into_iter().map(Change::Whiteout));
        }
        Ok(out)
    }
}

impl PatchKind for DiffPatch {
    fn meta(&self) -> &Meta {
        &self.meta
    }

    fn anchors(&self) -> Vec<String> {
        match self.root {
            Some(_) => Vec::new(),
            None => vec![self.anchor()],
        }
    }

    fn wanted(&self) -> Vec<String> {
        if self.root.is_some() {
            return Vec::new();
        }
        let mut w: Vec<String> = self.files.iter().map(|f| f.path().to_owned()).collect();
        w.push(format!("{}/__init__.py", self.package));
        w
    }

    fn paths(&self) -> Vec<String> {
        match &self.root {
            Some(dir) => self.files.iter().map(|f| join(dir, f.path())).collect(),
            None => Vec::new(),
        }
    }

    fn writes(&self) -> Vec<String> {
        match self.root {
            Some(_) => root::writes(&self.files),
            None => self.wanted(),
        }
    }

    fn decide(&self, tree: &dyn Tree) -> Verdict {
        if let Some(dir) = &self.root {
            let label = match root::locate(tree, dir, &self.files) {
                Ok(l) => l,
                Err(v) => return *v,
            };
            return match self.apply_all(tree, &label, &|rel| root::real_path(tree, dir, rel)) {
                Ok(a) => self.conclude(&label, a, String::new()),
                Err(reason) => Verdict::refused(reason),
            };
        }
        let root = match self.root(tree) {
            Ok(r) => r,
            Err(v) => return *v,
        };
        let version = tree.package_version(&root, &self.package);
        if let Err(v) = self.in_range(&root, version.as_ref()) {
            return *v;
        }
        let a = match self.apply_all(tree, &root, &|rel| Ok(join(&root, rel))) {
            Ok(a) => a,
            Err(reason) => return Verdict::refused(reason),
        };
        let about = version.map(|v| format!(" ({} {v})", self.package));
        self.conclude(&root, a, about.unwrap_or_default())
    }

    fn describe(&self) -> Description {
        let files: Vec<&str> = self.files.iter().map(|f| f.path()).collect();
        let mut fields = json!({"diff": self.diff_name, "files": files});
        let mut lines = vec![("kind", format!("diff ({})", self.diff_name))];
        match &self.root {
            Some(dir) => {
                fields["root"] = json!(format!("/{dir}"));
                lines.push(("root", format!("/{dir}")));
            }
            None => lines.push(("affected", self.meta.affected_text())),
        }
        lines.push(("files", files.join(", ")));
        Description {
            fields: fields.as_object().cloned().unwrap_or_default(),
            lines,
        }
    }
}

impl DiffPatch {
    /// The verdict once every file was tried under `root`: all applied, all already there, or
    /// refused as partly applied.
    fn conclude(&self, root: &str, mut a: Applied, about: String) -> Verdict {
        match (a.applied.is_empty(), a.already.is_empty()) {
            (false, false) => Verdict::refused(format!(
                "/{root}: partly applied: {} would apply but {} already carry the change; refusing to complete it by guessing",
                a.applied.join(", "),
                a.already.join(", ")
            )),
            (true, _) => Verdict::already_patched(format!(
                "/{root}: every file already carries patch {}",
                self.meta.id
            )),
            (false, true) => {
                a.notes.insert(
                    0,
                    format!("/{root}: {} file(s) patched{about}", a.applied.len()),
                );
                Verdict::patched(a.changes, None, a.notes)
            }
        }
    }
}

#[cfg(test)]
mod tests;
