//! The `diff` kind: a unified diff (git or GNU format, several files) applied relative to the
//! root of a Python package found in the image: the directory that holds `<package>/`
//! (`.../dist-packages`, `.../site-packages`, an editable checkout), found from what the image
//! shows, not guessed from one layout. Every file must apply (patched) or every file must
//! reverse-apply (already patched); anything else is refused, so a half-applied diff is never
//! completed by guessing.

use std::path::Path;

use serde::Deserialize;

use super::unified::{self, FileDiff};
use super::{Change, ImageView, Meta, PatchKind, Verdict};
use crate::scan::{EntryKind, FileEntry};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffToml {
    id: toml::Spanned<String>,
    #[allow(dead_code)]
    kind: String,
    title: String,
    #[serde(default)]
    services: Vec<String>,
    #[serde(default)]
    backends: Vec<String>,
    package: toml::Spanned<String>,
    affected: Option<crate::version::VersionRange>,
    diff: toml::Spanned<String>,
    mtime: Option<String>,
}

/// A `diff` patch: its parsed files, in diff order.
#[derive(Debug, Clone)]
pub struct DiffPatch {
    pub meta: Meta,
    pub package: String,
    /// The diff file's name in the patch folder.
    pub diff_name: String,
    pub files: Vec<FileDiff>,
    /// The diff as read, part of the patch's definition digest.
    pub source: Vec<u8>,
}

impl DiffPatch {
    /// Loads the patch.toml and parses its diff now, so a bad diff stops the run before any
    /// registry is touched, naming the diff file and line.
    pub fn load(text: &str, origin: &str, folder: Option<&Path>) -> Result<Self, String> {
        let t: DiffToml = toml::from_str(text).map_err(|e| super::toml_error(origin, text, &e))?;
        let mtime = t.mtime.unwrap_or_else(|| super::DEFAULT_MTIME.to_owned());
        super::check_common(origin, text, &t.id, &t.services, &t.backends, &mtime)?;
        let package = t.package.get_ref().clone();
        if package.is_empty()
            || !package
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(super::at_line(
                origin,
                text,
                t.package.span().start,
                &format!("package {package:?} is not an importable Python package name"),
            ));
        }
        let diff_at = t.diff.span().start;
        let name = t.diff.get_ref().clone();
        if name.is_empty() || name.contains('/') || name.contains('\\') || name == ".." {
            return Err(super::at_line(
                origin,
                text,
                diff_at,
                &format!("diff {name:?} must name a file in the patch folder"),
            ));
        }
        let Some(folder) = folder else {
            return Err(super::at_line(
                origin,
                text,
                diff_at,
                "a built-in patch cannot carry a diff file",
            ));
        };
        let path = folder.join(&name);
        let bytes = std::fs::read(&path).map_err(|e| {
            super::at_line(
                origin,
                text,
                diff_at,
                &format!("cannot read diff {}: {e}", path.display()),
            )
        })?;
        let files = unified::parse(&bytes)
            .map_err(|e| format!("{}:{}: {}", path.display(), e.line, e.message))?;
        for f in &files {
            if !f.path().starts_with(&format!("{package}/")) {
                return Err(format!(
                    "{}:{}: {} is not under {package}/ (paths are relative to the directory that holds the package)",
                    path.display(),
                    f.line,
                    f.path()
                ));
            }
        }
        Ok(DiffPatch {
            meta: Meta {
                id: t.id.get_ref().clone(),
                kind: super::Kind::Diff,
                title: t.title,
                services: t.services,
                backends: t.backends,
                package: Some(package.clone()),
                affected: t.affected,
                mtime,
                origin: origin.to_owned(),
                definition_digest: String::new(),
            },
            package,
            diff_name: name,
            files,
            source: bytes,
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
        (None, false, false) => Err(format!("{path} does not exist under the package root")),
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

impl PatchKind for DiffPatch {
    fn meta(&self) -> &Meta {
        &self.meta
    }

    fn anchors(&self) -> Vec<String> {
        vec![self.anchor()]
    }

    fn wanted(&self) -> Vec<String> {
        let mut w: Vec<String> = self.files.iter().map(|f| f.path().to_owned()).collect();
        w.push(format!("{}/__init__.py", self.package));
        w
    }

    fn decide(&self, image: &dyn ImageView) -> Verdict {
        let refused = |reason: String| Verdict::Refused { reason };
        let anchor = self.anchor();
        let roots: Vec<String> = image
            .find(&anchor)
            .iter()
            .map(|p| {
                p.strip_suffix(anchor.as_str())
                    .unwrap_or("")
                    .trim_end_matches('/')
                    .to_owned()
            })
            .collect();
        let root = match roots.as_slice() {
            [] => {
                let init = format!("{}/__init__.py", self.package);
                return if image.find(&init).is_empty() {
                    Verdict::NotAffected {
                        reason: format!("no package {} here (no visible **/{init})", self.package),
                    }
                } else {
                    refused(format!(
                        "no visible **/{anchor}: the diff does not fit this {} package",
                        self.package
                    ))
                };
            }
            [one] => one.clone(),
            many => {
                return refused(format!(
                    "{} roots hold **/{anchor} (/{}); refusing to guess which one runs",
                    many.len(),
                    many.join(", /")
                ))
            }
        };
        let full = |p: &str| {
            if root.is_empty() {
                p.to_owned()
            } else {
                format!("{root}/{p}")
            }
        };
        let version = image.package_version(&root, &self.package);
        if let (Some(v), Some(range)) = (&version, &self.meta.affected) {
            if let Some(parsed) = crate::version::Version::parse(v) {
                if !range.contains(&parsed) {
                    return Verdict::NotAffected {
                        reason: format!(
                            "{} {v} at /{root} is outside the affected range {range}",
                            self.package
                        ),
                    };
                }
            }
        }
        let mtime = match crate::layer::parse_rfc3339(&self.meta.mtime) {
            Ok(t) => t,
            Err(e) => return refused(format!("mtime: {e}")),
        };
        let mut changes = Vec::new();
        let mut notes = Vec::new();
        let (mut applied, mut already) = (Vec::new(), Vec::new());
        for fd in &self.files {
            let path = full(fd.path());
            let entry = match image.file(&path) {
                Ok(e) => e,
                Err(e) => return refused(e),
            };
            if let Some(e) = &entry {
                match &e.kind {
                    EntryKind::Regular => {}
                    EntryKind::Symlink(to) | EntryKind::Hardlink(to) => {
                        return refused(format!(
                            "/{path} is a link to {to:?}; links are refused, not followed"
                        ))
                    }
                    EntryKind::Other(k) => {
                        return refused(format!("/{path} is a {k} entry, not a regular file"))
                    }
                }
            }
            match decide_file(fd, entry.as_ref().map(|e| e.content.as_slice())) {
                Err(reason) => return refused(format!("/{root}: {reason}")),
                Ok(Step::Already) => already.push(fd.path().to_owned()),
                Ok(Step::Apply { new, placed }) => {
                    applied.push(fd.path().to_owned());
                    for p in placed.iter().filter(|p| p.offset != 0) {
                        notes.push(format!(
                            "{}: hunk #{} applied at offset {:+} lines",
                            fd.path(),
                            p.hunk,
                            p.offset
                        ));
                    }
                    match (new, entry) {
                        (None, _) => changes.push(Change::Whiteout(path.clone())),
                        (Some(bytes), Some(orig)) => {
                            let mtime = crate::layer::new_mtime(mtime, &orig);
                            changes.push(Change::Write(FileEntry {
                                content: std::sync::Arc::new(bytes),
                                mtime,
                                ..orig
                            }))
                        }
                        (Some(bytes), None) => changes.push(Change::Write(FileEntry {
                            path: path.clone(),
                            kind: EntryKind::Regular,
                            mode: 0o644,
                            uid: 0,
                            gid: 0,
                            uname: None,
                            gname: None,
                            mtime,
                            content: std::sync::Arc::new(bytes),
                        })),
                    }
                    changes.extend(
                        image
                            .stale_bytecode(&path)
                            .into_iter()
                            .map(Change::Whiteout),
                    );
                }
            }
        }
        match (applied.is_empty(), already.is_empty()) {
            (false, false) => refused(format!(
                "/{root}: partly applied: {} would apply but {} already carry the change; refusing to complete it by guessing",
                applied.join(", "),
                already.join(", ")
            )),
            (true, _) => Verdict::AlreadyPatched {
                reason: format!("/{root}: every file already carries patch {}", self.meta.id),
            },
            (false, true) => {
                notes.insert(
                    0,
                    format!(
                        "/{root}: {} file(s) patched{}",
                        applied.len(),
                        version.map(|v| format!(" ({} {v})", self.package)).unwrap_or_default()
                    ),
                );
                Verdict::Patched {
                    changes,
                    config: None,
                    notes,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testview::Mem;
    use super::*;

    const DIFF: &str = "diff --git a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+x = 1\n--- a/pkg/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n";
    const ROOT: &str = "usr/lib/python3/dist-packages";

    fn patch(affected: Option<&str>) -> DiffPatch {
        DiffPatch {
            meta: Meta {
                id: "t".into(),
                kind: super::super::Kind::Diff,
                title: "t".into(),
                services: vec![],
                backends: vec![],
                package: Some("pkg".into()),
                affected: affected.map(|a| crate::version::VersionRange::parse(a).expect("range")),
                mtime: "2001-01-01T00:00:00Z".into(),
                origin: "t/patch.toml".into(),
                definition_digest: String::new(),
            },
            package: "pkg".into(),
            diff_name: "fix.patch".into(),
            files: unified::parse(DIFF.as_bytes()).expect("parses"),
            source: DIFF.as_bytes().to_vec(),
        }
    }

    fn tree(files: &[(&str, &str)]) -> Mem {
        Mem(
            files
                .iter()
                .map(|(p, c)| (format!("{ROOT}/{p}"), c.as_bytes().to_vec()))
                .collect(),
            None,
        )
    }

    const A: &str = "a\nb\nc\nd\ne\n";

    #[test]
    fn patches_creates_deletes_and_hides_bytecode() {
        let img = tree(&[
            ("pkg/__init__.py", ""),
            ("pkg/a.py", A),
            ("pkg/old.py", "gone\n"),
            ("pkg/__pycache__/a.cpython-312.pyc", "x"),
        ]);
        let Verdict::Patched { changes, .. } = patch(None).decide(&img) else {
            panic!("expected patched")
        };
        let Change::Write(a) = &changes[0] else {
            panic!("a write first")
        };
        assert_eq!(a.path, format!("{ROOT}/pkg/a.py"));
        assert_eq!(a.content.as_slice(), b"a\nb\nC\nd\ne\n");
        assert_eq!(
            (a.mode, a.uid, a.gid),
            (0o640, 7, 8),
            "header of the original"
        );
        assert!(
            matches!(&changes[1], Change::Whiteout(p) if *p == format!("{ROOT}/pkg/__pycache__/a.cpython-312.pyc")),
            "{changes:?}"
        );
        let Change::Write(n) = &changes[2] else {
            panic!("created file")
        };
        assert_eq!(
            (n.mode, n.uid, n.content.as_slice()),
            (0o644, 0, &b"x = 1\n"[..])
        );
        assert!(matches!(&changes[3], Change::Whiteout(p) if *p == format!("{ROOT}/pkg/old.py")));
    }

    #[test]
    fn already_patched_partial_and_mismatch() {
        let done = tree(&[
            ("pkg/__init__.py", ""),
            ("pkg/a.py", "a\nb\nC\nd\ne\n"),
            ("pkg/new.py", "x = 1\n"),
        ]);
        assert!(matches!(
            patch(None).decide(&done),
            Verdict::AlreadyPatched { .. }
        ));
        let half = tree(&[
            ("pkg/__init__.py", ""),
            ("pkg/a.py", A),
            ("pkg/new.py", "x = 1\n"),
        ]);
        let v = patch(None).decide(&half);
        assert!(
            matches!(&v, Verdict::Refused { reason } if reason.contains("partly applied")),
            "{v:?}"
        );
        let other = tree(&[
            ("pkg/__init__.py", ""),
            ("pkg/a.py", "a\nb\nX\nd\ne\n"),
            ("pkg/old.py", "gone\n"),
        ]);
        let v = patch(None).decide(&other);
        assert!(
            matches!(&v, Verdict::Refused { reason } if reason.contains("hunk #1")),
            "{v:?}"
        );
    }

    #[test]
    fn root_is_found_and_version_range_applies() {
        let none = tree(&[("other/x.py", "")]);
        assert!(matches!(
            patch(None).decide(&none),
            Verdict::NotAffected { .. }
        ));
        let mut two = tree(&[
            ("pkg/__init__.py", ""),
            ("pkg/a.py", A),
            ("pkg/old.py", "gone\n"),
        ]);
        two.0
            .insert("vllm-workspace/src/pkg/a.py".into(), A.as_bytes().to_vec());
        let v = patch(None).decide(&two);
        assert!(
            matches!(&v, Verdict::Refused { reason } if reason.contains("2 roots")),
            "{v:?}"
        );
        let mut old = tree(&[
            ("pkg/__init__.py", ""),
            ("pkg/a.py", A),
            ("pkg/old.py", "gone\n"),
        ]);
        old.1 = Some("0.9.0".into());
        assert!(matches!(
            patch(Some(">=1.0")).decide(&old),
            Verdict::NotAffected { .. }
        ));
        old.1 = Some("1.2.0".into());
        assert!(matches!(
            patch(Some(">=1.0")).decide(&old),
            Verdict::Patched { .. }
        ));
    }
}
