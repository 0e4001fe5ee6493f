//! The `files` kind: whole files from the patch folder placed at absolute paths, each with a
//! mode and an optional owner (default: the replaced file's, else root), and absolute paths
//! deleted (whiteouts). Paths are resolved as the container resolves them: a symbolic link at
//! any ancestor is followed inside the image and the file written at the real path
//! (`scan::links`). Already patched when every placed file is there with its bytes and mode
//! (and owner, when given) and every deleted path is gone; otherwise only what differs is
//! written.

use serde_json::json;

pub mod spec;

use crate::patch::error::Error;
use crate::patch::kind::{Description, Patch, PatchKind};
use crate::patch::meta::{self, Meta};
use crate::patch::source::Source;
use crate::patch::tree::{package_version_at_init, Tree};
use crate::patch::verdict::{About, Change, Verdict};
use crate::scan::{FileEntry, Node, Resolved};
use spec::{Placed, Spec};

/// A loaded `files` patch.
#[derive(Debug, Clone)]
pub struct FilesPatch {
    pub meta: Meta,
    pub spec: Spec,
}

/// Loads a `files` patch.toml and every file it places.
pub fn load(src: &Source<'_>) -> Result<Patch, Error> {
    let mut meta = meta::read(src, "files")?;
    let spec = spec::read(src)?;
    let sources: Vec<&[u8]> = spec.sources.iter().map(Vec::as_slice).collect();
    meta.definition_digest = src.definition_digest(&sources);
    Ok(Patch::new(FilesPatch { meta, spec }))
}

/// `/spelled` and, when links led elsewhere, ` (= /real through /link -> target)`.
fn shown(spelled: &str, r: &Resolved) -> String {
    match r.via.last() {
        None => format!("/{spelled}"),
        Some((link, target)) => format!("/{spelled} (= /{} through /{link} -> {target})", r.path),
    }
}

/// What one path needs.
enum Step {
    Done,
    Change(Change, String),
}

impl FilesPatch {
    /// The path resolved, with what the container finds there; `Err` is a refusal.
    fn resolve(&self, tree: &dyn Tree, path: &str) -> Result<Resolved, String> {
        tree.resolve(path).map_err(|e| format!("/{path}: {e}"))
    }

    /// What placing one file takes: nothing when it is there with its bytes, mode and owner.
    fn place(&self, tree: &dyn Tree, f: &Placed) -> Result<(Step, Resolved), String> {
        let r = self.resolve(tree, &f.path)?;
        let at = shown(&f.path, &r);
        let existing: Option<FileEntry> = match &r.node {
            Node::Absent => None,
            Node::Entry(crate::scan::NodeKind::File) => {
                match tree.file(&r.path).map_err(|e| e.to_string())? {
                    Some(e) if e.kind == crate::scan::EntryKind::Regular => Some(e),
                    _ => return Err(format!("{at}: the file the image shows there could not be read")),
                }
            }
            Node::Link(to) => {
                return Err(format!(
                    "{at} is a symbolic link to {to:?}; a files patch writes regular files: name the path it points to"
                ))
            }
            Node::Dir => return Err(format!("{at} is a directory")),
            Node::Entry(k) => return Err(format!("{at} is {}, not a regular file", k.describe())),
        };
        let same_owner =
            |e: &FileEntry| f.uid.is_none_or(|u| u == e.uid) && f.gid.is_none_or(|g| g == e.gid);
        if let Some(e) = &existing {
            if *e.content == *f.content && e.mode & 0o7777 == f.mode && same_owner(e) {
                return Ok((Step::Done, r));
            }
        }
        let (entry, what) = match existing {
            Some(orig) => (
                FileEntry {
                    path: r.path.clone(),
                    mode: f.mode,
                    uid: f.uid.unwrap_or(orig.uid),
                    gid: f.gid.unwrap_or(orig.gid),
                    // A name that no longer goes with the id is dropped.
                    uname: orig
                        .uname
                        .clone()
                        .filter(|_| f.uid.is_none_or(|u| u == orig.uid)),
                    gname: orig
                        .gname
                        .clone()
                        .filter(|_| f.gid.is_none_or(|g| g == orig.gid)),
                    mtime: self.meta.mtime_replacing(&orig),
                    content: f.content.clone(),
                    ..orig
                },
                "replaced",
            ),
            None => {
                let mut e = FileEntry::created(
                    r.path.clone(),
                    f.content.to_vec(),
                    f.mode,
                    self.meta.mtime_secs,
                );
                e.uid = f.uid.unwrap_or(0);
                e.gid = f.gid.unwrap_or(0);
                (e, "created")
            }
        };
        let note = format!(
            "{at}: {what} (mode {:04o}, owner {}:{})",
            f.mode, entry.uid, entry.gid
        );
        Ok((Step::Change(Change::Write(entry), note), r))
    }

    /// What deleting one path takes: nothing when the container does not see it.
    fn delete(&self, tree: &dyn Tree, path: &str) -> Result<(Step, Resolved), String> {
        let r = self.resolve(tree, path)?;
        if r.node == Node::Absent {
            return Ok((Step::Done, r));
        }
        let note = format!("{}: deleted", shown(path, &r));
        Ok((Step::Change(Change::Whiteout(r.path.clone()), note), r))
    }

    /// `Err(not affected)` when the patch names a package that is not here or not affected.
    fn selected(&self, tree: &dyn Tree) -> Result<Option<String>, Box<Verdict>> {
        let Some(pkg) = &self.meta.package else {
            return Ok(None);
        };
        if tree.find(&format!("{pkg}/__init__.py")).is_empty() {
            return Err(Box::new(Verdict::not_affected(format!(
                "no package {pkg} here"
            ))));
        }
        let version = package_version_at_init(tree, pkg);
        if let (Some(v), Some(range)) = (&version, &self.meta.affected) {
            if crate::version::Version::parse(v).is_some_and(|p| !range.contains(&p)) {
                return Err(Box::new(Verdict::not_affected(format!(
                    "{pkg} {v} is outside the affected range {range}"
                ))));
            }
        }
        Ok(version)
    }

    fn decide_all(&self, tree: &dyn Tree) -> Result<Verdict, String> {
        let mut changes = Vec::new();
        let mut notes = Vec::new();
        let mut first = None;
        let steps = self
            .spec
            .files
            .iter()
            .map(|f| self.place(tree, f))
            .chain(self.spec.delete.iter().map(|d| self.delete(tree, d)));
        for step in steps {
            let (step, r) = step?;
            first.get_or_insert_with(|| format!("/{}", r.path));
            if let Step::Change(c, note) = step {
                let path = c.path().to_owned();
                changes.push(c);
                changes.extend(tree.stale_bytecode(&path).into_iter().map(Change::Whiteout));
                notes.push(note);
            }
        }
        let about = About {
            file: first,
            ..About::default()
        };
        if changes.is_empty() {
            return Ok(Verdict::already_patched(format!(
                "every file of patch {} is in place and every deleted path is gone",
                self.meta.id
            ))
            .about(about));
        }
        Ok(Verdict::patched(changes, None, notes).about(about))
    }
}

impl PatchKind for FilesPatch {
    fn meta(&self) -> &Meta {
        &self.meta
    }

    fn wanted(&self) -> Vec<String> {
        self.meta
            .package
            .iter()
            .map(|p| format!("{p}/__init__.py"))
            .collect()
    }

    fn paths(&self) -> Vec<String> {
        let placed = self.spec.files.iter().map(|f| f.path.clone());
        placed.chain(self.spec.delete.iter().cloned()).collect()
    }

    /// The file names it writes: the directories they land in depend on the links the image
    /// holds (the check that each is where it belongs is [`PatchKind::check`]'s decision).
    fn writes(&self) -> Vec<String> {
        self.spec
            .files
            .iter()
            .map(|f| f.path.rsplit('/').next().unwrap_or(&f.path).to_owned())
            .collect()
    }

    fn decide(&self, tree: &dyn Tree) -> Verdict {
        let version = match self.selected(tree) {
            Ok(v) => v,
            Err(v) => return *v,
        };
        match self.decide_all(tree) {
            Ok(mut v) => {
                v.about.version = version;
                v
            }
            Err(reason) => Verdict::refused(reason),
        }
    }

    fn describe(&self) -> Description {
        let files: Vec<_> = self
            .spec
            .files
            .iter()
            .map(|f| {
                json!({"path": format!("/{}", f.path), "source": f.source,
                            "mode": format!("{:04o}", f.mode), "uid": f.uid, "gid": f.gid})
            })
            .collect();
        let deleted: Vec<String> = self.spec.delete.iter().map(|d| format!("/{d}")).collect();
        let mut lines = vec![("kind", "files".to_owned())];
        for f in &self.spec.files {
            lines.push((
                "file",
                format!("/{} <- {} ({:04o})", f.path, f.source, f.mode),
            ));
        }
        if !deleted.is_empty() {
            lines.push(("delete", deleted.join(", ")));
        }
        let fields = json!({"files": files, "delete": deleted});
        Description {
            fields: fields.as_object().cloned().unwrap_or_default(),
            lines,
        }
    }
}

#[cfg(test)]
mod tests;
