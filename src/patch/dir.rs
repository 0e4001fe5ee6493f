//! An unpacked tree (a rootfs from `umoci unpack`, or any folder holding a package) as a
//! [`Tree`], and the writing of a verdict's changes into it: what `patch-dir` uses to
//! check a patch on real files without a registry, and to compare with GNU `patch -p1`.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::patch::error::{Error, ErrorKind};
use crate::patch::kind::Patch;
use crate::patch::meta::Meta;
use crate::patch::outcome::Outcome;
use crate::patch::tree::{is_dist_metadata, version_py, Below, Tree};
use crate::patch::verdict::{Change, Verdict};
use crate::scan::{EntryKind, FileEntry, LinkError, Node, NodeKind, Resolved};

/// Every path under a root, read once.
pub struct DirTree {
    root: PathBuf,
    /// Relative path -> is a directory.
    paths: BTreeMap<String, bool>,
}

impl DirTree {
    /// Lists the tree once; links are listed, never followed.
    pub fn open(root: &Path) -> Result<Self, Error> {
        let meta = std::fs::metadata(root)
            .map_err(|e| io(format!("cannot read {}: {e}", root.display())))?;
        if !meta.is_dir() {
            return Err(io(format!("{} is not a directory", root.display())));
        }
        let mut paths = BTreeMap::new();
        let mut stack = vec![(root.to_path_buf(), String::new())];
        while let Some((dir, rel)) = stack.pop() {
            let rd = std::fs::read_dir(&dir)
                .map_err(|e| io(format!("cannot read {}: {e}", dir.display())))?;
            for entry in rd {
                let entry = entry.map_err(|e| io(format!("cannot read {}: {e}", dir.display())))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let r = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
                if is_dir {
                    stack.push((entry.path(), r.clone()));
                }
                paths.insert(r, is_dir);
            }
        }
        Ok(DirTree {
            root: root.to_path_buf(),
            paths,
        })
    }

    fn abs(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

impl Tree for DirTree {
    fn find(&self, suffix: &str) -> Vec<String> {
        self.paths
            .iter()
            .filter(|(p, is_dir)| !**is_dir && crate::scan::has_suffix(p, suffix))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn file(&self, path: &str) -> Result<Option<FileEntry>, Error> {
        let abs = self.abs(path);
        let meta = match std::fs::symlink_metadata(&abs) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(format!("cannot read {}: {e}", abs.display()))),
        };
        let ft = meta.file_type();
        let (kind, content) = if ft.is_file() {
            let c = std::fs::read(&abs)
                .map_err(|e| io(format!("cannot read {}: {e}", abs.display())))?;
            (EntryKind::Regular, c)
        } else if ft.is_symlink() {
            let to = std::fs::read_link(&abs)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            (EntryKind::Symlink(to), Vec::new())
        } else if ft.is_dir() {
            (EntryKind::Other("directory".into()), Vec::new())
        } else {
            (EntryKind::Other("special".into()), Vec::new())
        };
        Ok(Some(FileEntry {
            path: path.to_owned(),
            kind,
            mode: meta.permissions().mode() & 0o7777,
            uid: u64::from(meta.uid()),
            gid: u64::from(meta.gid()),
            uname: None,
            gname: None,
            mtime: u64::try_from(meta.mtime()).unwrap_or(0),
            content: std::sync::Arc::new(content),
        }))
    }

    fn stale_bytecode(&self, path: &str) -> Vec<String> {
        let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
        let Some(stem) = file.strip_suffix(".py") else {
            return Vec::new();
        };
        let prefix = if dir.is_empty() {
            format!("__pycache__/{stem}.")
        } else {
            format!("{dir}/__pycache__/{stem}.")
        };
        self.paths
            .keys()
            .filter(|p| p.starts_with(&prefix) && p.ends_with(".pyc"))
            .cloned()
            .collect()
    }

    fn package_version(&self, root: &str, package: &str) -> Option<String> {
        let meta = self
            .paths
            .keys()
            .find(|p| is_dist_metadata(root, package, p));
        [meta.cloned(), Some(version_py(root, package))]
            .into_iter()
            .flatten()
            .find_map(|p| {
                let c = std::fs::read(self.abs(&p)).ok()?;
                crate::scan::version_from_file(&p, &c)
            })
    }

    fn config(&self) -> Option<&serde_json::Value> {
        None
    }

    fn resolve(&self, path: &str) -> Result<Resolved, LinkError> {
        crate::scan::resolve(path, |p| self.node(p))
    }

    fn bytecode_below(&self) -> Below {
        // The folder holds everything: the `.pyc` files it shows are all there are.
        Below::Known
    }
}

impl DirTree {
    /// What the folder holds at `path`, links not followed.
    fn node(&self, path: &str) -> Node {
        let abs = self.abs(path);
        let Ok(meta) = std::fs::symlink_metadata(&abs) else {
            return Node::Absent;
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            Node::Dir
        } else if ft.is_symlink() {
            match std::fs::read_link(&abs) {
                Ok(to) => Node::Link(to.to_string_lossy().into_owned()),
                Err(_) => Node::Entry(NodeKind::Symlink),
            }
        } else if ft.is_file() {
            Node::Entry(NodeKind::File)
        } else {
            Node::Entry(NodeKind::Other)
        }
    }
}

/// Writes a change's bytes at `abs` (a streamed file copied from its reader).
fn write_content(abs: &Path, c: &Change) -> Result<(), Error> {
    let failed = |err: std::io::Error| io(format!("cannot write {}: {err}", abs.display()));
    match c {
        Change::Write(e) => std::fs::write(abs, e.content.as_slice()).map_err(failed),
        Change::Stream(s) => {
            let mut from = (s.open)().map_err(failed)?;
            let mut to = std::fs::File::create(abs).map_err(failed)?;
            std::io::copy(&mut from, &mut to)
                .map(|_| ())
                .map_err(failed)
        }
        Change::Whiteout(_) => Ok(()),
    }
}

/// Writes changes into the tree at `root`: file contents with the entry's mode (and its owner,
/// when it is not the file's already), parents created; whiteouts as removals (of a whole
/// directory, too). Paths are real paths ([`Tree::resolve`]): no link is followed.
pub fn write_changes(root: &Path, changes: &[Change]) -> Result<(), Error> {
    for c in changes {
        let abs = root.join(c.path());
        match c {
            Change::Write(_) | Change::Stream(_) => {
                let e = match c {
                    Change::Stream(s) => &s.entry,
                    Change::Write(e) => e,
                    Change::Whiteout(_) => continue,
                };
                if let Some(parent) = abs.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|err| io(format!("cannot create {}: {err}", parent.display())))?;
                }
                write_content(&abs, c)?;
                std::fs::set_permissions(&abs, std::fs::Permissions::from_mode(e.mode & 0o7777))
                    .map_err(|err| io(format!("cannot chmod {}: {err}", abs.display())))?;
                own(&abs, e)?;
            }
            Change::Whiteout(_) => {
                let gone = match std::fs::symlink_metadata(&abs) {
                    Ok(m) if m.is_dir() => std::fs::remove_dir_all(&abs),
                    Ok(_) => std::fs::remove_file(&abs),
                    Err(err) => Err(err),
                };
                match gone {
                    Ok(()) => {}
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => return Err(io(format!("cannot remove {}: {err}", abs.display()))),
                }
            }
        }
    }
    Ok(())
}

/// Gives a written file the entry's owner when it has another one and this process may (a
/// rootless unpack maps owners anyway; only root can give files away).
fn own(abs: &Path, e: &FileEntry) -> Result<(), Error> {
    let meta = std::fs::metadata(abs)
        .map_err(|err| io(format!("cannot read {}: {err}", abs.display())))?;
    if u64::from(meta.uid()) == e.uid && u64::from(meta.gid()) == e.gid {
        return Ok(());
    }
    let ids = u32::try_from(e.uid).ok().zip(u32::try_from(e.gid).ok());
    let Some((uid, gid)) = ids else {
        return Err(io(format!(
            "cannot give {} the owner {}:{}",
            abs.display(),
            e.uid,
            e.gid
        )));
    };
    match std::os::unix::fs::chown(abs, Some(uid), Some(gid)) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => Ok(()),
        Err(err) => Err(io(format!(
            "cannot give {} the owner {uid}:{gid}: {err}",
            abs.display()
        ))),
    }
}

fn io(message: String) -> Error {
    Error::new(ErrorKind::Io, message)
}

/// What each patch of a stack decided on an unpacked tree, in order.
pub struct Stacked {
    pub results: Vec<(Meta, Verdict)>,
    /// A patch refused: the stack stopped there, with nothing of that patch written.
    pub refused: bool,
}

/// Applies patches in order to the tree at `root`, each deciding on what the ones before it
/// wrote (unless `dry_run`, when nothing is written), the first refused one stopping the
/// stack: what `patch-dir` does, with the decisions the registry path makes.
pub fn apply_stack(root: &Path, patches: &[Patch], dry_run: bool) -> Result<Stacked, Error> {
    let mut results = Vec::new();
    let mut refused = false;
    for p in patches {
        let verdict = p.decide(&DirTree::open(root)?);
        if verdict.outcome == Outcome::Patched && !dry_run {
            write_changes(root, &verdict.changes)?;
        }
        refused |= verdict.outcome == Outcome::Refused;
        results.push((p.meta().clone(), verdict));
        if refused {
            break;
        }
    }
    Ok(Stacked { results, refused })
}

impl Stacked {
    /// One JSON object: the root, whether a dry run, and per patch its outcome, reason,
    /// changes (path, write with its octal mode, or whiteout) and notes.
    pub fn json(&self, root: &Path, dry_run: bool) -> serde_json::Value {
        use serde_json::json;
        let list: Vec<_> = self
            .results
            .iter()
            .map(|(m, v)| {
                let changes: Vec<_> = v
                    .changes
                    .iter()
                    .map(|c| match c {
                        Change::Write(e) => {
                            json!({"path": e.path, "action": "write", "mode": format!("{:o}", e.mode)})
                        }
                        Change::Stream(s) => {
                            json!({"path": s.entry.path, "action": "write", "mode": format!("{:o}", s.entry.mode)})
                        }
                        Change::Whiteout(p) => json!({"path": p, "action": "whiteout"}),
                    })
                    .collect();
                json!({"patch": m.id, "kind": m.kind, "outcome": v.outcome.as_str(),
                       "reason": v.summary(), "changes": changes, "notes": v.notes})
            })
            .collect();
        json!({"root": root.display().to_string(), "dry_run": dry_run, "patches": list})
    }

    /// The text for people: per patch its outcome and reason, and what a patched one writes.
    pub fn text(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (m, v) in &self.results {
            out.push(format!("{}: {}: {}", m.id, v.outcome, v.summary()));
            if v.outcome == Outcome::Patched {
                for c in &v.changes {
                    let what = match c {
                        Change::Write(_) | Change::Stream(_) => "write",
                        Change::Whiteout(_) => "whiteout",
                    };
                    out.push(format!("  {what} /{}", c.path()));
                }
            }
        }
        out
    }
}
