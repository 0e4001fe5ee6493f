//! What a patch sees of an image: a [`Tree`] of visible files and the config (the overlay of an
//! image's layers, or an unpacked folder), and for `verify` a [`Layered`] tree that also says
//! which layer each copy came from. Paths are relative to `/`, without a leading slash.

use crate::patch::dist::Dist;
use crate::patch::error::Error;
use crate::scan::{FileEntry, LinkError, Node, Resolved};

/// What a tree knows of compiled bytecode beyond the `.pyc` files it shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Below {
    /// Everything was read: the visible `.pyc` names are all there are.
    Known,
    /// Some layers were not read: bytecode of these Python 3 minor versions (the interpreters
    /// the layers read name; none known: every version `patch::bytecode` covers) may lie there.
    Unread(Vec<u32>),
}

/// The files and config an image shows.
pub trait Tree {
    /// Every visible path that ends with `suffix` on whole path components.
    fn find(&self, suffix: &str) -> Vec<String>;
    /// The visible entry at `path` (content read for regular files), if any.
    fn file(&self, path: &str) -> Result<Option<FileEntry>, Error>;
    /// Visible compiled bytecode of the module at `path` (`__pycache__/<stem>.*.pyc`), which
    /// must be hidden when the module changes.
    fn stale_bytecode(&self, path: &str) -> Vec<String>;
    /// The version of `package` installed at `root` (its dist-info, or `<package>/_version.py`).
    fn package_version(&self, root: &str, package: &str) -> Option<String>;
    /// The image config as JSON, when this tree has one.
    fn config(&self) -> Option<&serde_json::Value>;
    /// Why no copy of `suffix` is visible (a tree that knows what hides one says so).
    fn explain_missing(&self, suffix: &str) -> String {
        format!("no visible **/{suffix}")
    }
    /// `path` (relative to `/`) as the container resolves it: symbolic links at its ancestors
    /// followed inside the image (`scan::links`). A tree that knows no links has none.
    fn resolve(&self, path: &str) -> Result<Resolved, LinkError> {
        let node = match self.file(path) {
            Ok(Some(_)) => Node::Entry(crate::scan::NodeKind::File),
            _ => Node::Absent,
        };
        Ok(Resolved {
            path: path.to_owned(),
            node,
            via: Vec::new(),
        })
    }
    /// Every installed distribution the image shows (each visible `*.dist-info` directory with
    /// its metadata files), when the patch asked for them (`PatchKind::distributions`).
    fn dists(&self) -> Vec<Dist> {
        Vec::new()
    }
    /// The sha256 (`sha256:<hex>`) of the visible regular file at `path`, for the paths a patch
    /// asked to have hashed in a second read (`PatchKind::hashes`); `None` otherwise.
    fn hashed(&self, _path: &str) -> Option<String> {
        None
    }
    /// Whether layers the tree did not read may hold bytecode (`patch::bytecode`).
    fn bytecode_below(&self) -> Below {
        Below::Unread(Vec::new())
    }
}

/// A patched image as `verify` reads it: the visible tree, plus every copy of a file by layer
/// and which layers this tool appended, so a kind can check where what it wrote came from.
pub trait Layered: Tree {
    /// The copies of files ending in `suffix` in each layer that holds one, top-most layer
    /// first: (layer index, that layer's entries, in archive order).
    fn copies(&self, suffix: &str) -> Vec<(usize, Vec<FileEntry>)>;
    /// The indexes of the layers this tool appended (the tail of the image).
    fn added(&self) -> std::ops::Range<usize>;
    /// Why the image could not be read as the container sees it, when it could not.
    fn refusal(&self) -> Option<&str>;
}

/// Whether `path` is the dist-info `METADATA` of `package` installed at `root` (the folder
/// holding `<package>/`): `<root>/<dist>-*.dist-info/METADATA`, `-` in the name written `_`.
pub fn is_dist_metadata(root: &str, package: &str, path: &str) -> bool {
    let dist = package.replace('-', "_");
    let rest = if root.is_empty() {
        Some(path)
    } else {
        path.strip_prefix(root).and_then(|p| p.strip_prefix('/'))
    };
    rest.and_then(|r| r.strip_suffix(".dist-info/METADATA"))
        .is_some_and(|d| !d.contains('/') && d.starts_with(&format!("{dist}-")))
}

/// The `<package>/_version.py` under `root` (see [`is_dist_metadata`]).
pub fn version_py(root: &str, package: &str) -> String {
    if root.is_empty() {
        format!("{package}/_version.py")
    } else {
        format!("{root}/{package}/_version.py")
    }
}

/// `root` joined with a path relative to it (`root` empty: the path itself).
pub fn join(root: &str, rel: &str) -> String {
    if root.is_empty() {
        rel.to_owned()
    } else {
        format!("{root}/{rel}")
    }
}

/// The version of `package` where its `__init__.py` is visible: what the map reports for a
/// patch whose kind names no file of its own.
pub fn package_version_at_init(tree: &dyn Tree, package: &str) -> Option<String> {
    let init = format!("{package}/__init__.py");
    let path = tree.find(&init).into_iter().next()?;
    let root = path.strip_suffix(&init).unwrap_or("").trim_end_matches('/');
    tree.package_version(root, package)
}

/// A tree held in memory, for the kinds' unit tests.
#[cfg(test)]
pub(crate) mod mem {
    use std::collections::BTreeMap;

    use super::Tree;
    use crate::patch::error::Error;
    use crate::scan::{EntryKind, FileEntry};

    /// path -> content, and the version `package_version` answers.
    pub struct Mem(pub BTreeMap<String, Vec<u8>>, pub Option<String>);

    impl Tree for Mem {
        fn find(&self, suffix: &str) -> Vec<String> {
            self.0
                .keys()
                .filter(|p| crate::scan::has_suffix(p, suffix))
                .cloned()
                .collect()
        }
        fn file(&self, path: &str) -> Result<Option<FileEntry>, Error> {
            Ok(self.0.get(path).map(|c| FileEntry {
                path: path.to_owned(),
                kind: EntryKind::Regular,
                mode: 0o640,
                uid: 7,
                gid: 8,
                uname: None,
                gname: None,
                mtime: 5,
                content: std::sync::Arc::new(c.clone()),
            }))
        }
        fn stale_bytecode(&self, path: &str) -> Vec<String> {
            let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
            let stem = file.trim_end_matches(".py");
            self.0
                .keys()
                .filter(|p| p.starts_with(&format!("{dir}/__pycache__/{stem}.")))
                .cloned()
                .collect()
        }
        fn package_version(&self, _root: &str, _package: &str) -> Option<String> {
            self.1.clone()
        }
        fn config(&self) -> Option<&serde_json::Value> {
            None
        }
    }
}
