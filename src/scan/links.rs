//! Paths as the container resolves them: a symbolic link at any ancestor of a path is followed
//! inside the image (absolute targets from the image root, relative ones from the link's
//! directory, `..` within the image), the way the kernel resolves it in a running container. A
//! link that leads out of the image root, or a chain that comes back to itself, is refused
//! rather than guessed at.
//!
//! How a top-down scan learns enough to do this in one read of each layer: a scan for exact
//! paths ([`super::Wanted::paths`]) keeps the target of every link and the index of every
//! directory of each layer, besides the index of non-directory entries it always keeps. After
//! the walk ([`Descent`]) any path can be resolved over all layers; a file found through a link
//! at a path no scan kept is then read from the one layer the index names as holding its
//! top-most copy (`crate::visible` does that second read).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use super::overlay::{hider_in, index_key, Descent, LayerScan, NodeKind};
use super::types::{FileEntry, INDEX_ENTRY, ITEM_OVERHEAD};

/// The most links one resolution follows (as Linux's `MAXSYMLINKS`).
pub const MAX_LINKS: usize = 40;

/// What the container finds at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// Nothing visible (or a directory known only from what lies below it).
    Absent,
    /// A directory entry.
    Dir,
    /// A symbolic link, with its target as written.
    Link(String),
    /// Any other non-directory entry (a regular file, a hard link, a device, ...).
    Entry(NodeKind),
}

/// A path once the links at its ancestors were followed (its last component is not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The real path, relative to `/`.
    pub path: String,
    /// What is there.
    pub node: Node,
    /// The links followed, in order: (link path, its target).
    pub via: Vec<(String, String)>,
}

/// Why a path cannot be resolved inside the image; each names the path and the link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("the symbolic link /{link} -> {target} leads out of the image root")]
    LeavesRoot { link: String, target: String },
    #[error("/{path} leads out of the image root")]
    PathLeavesRoot { path: String },
    #[error("the symbolic link /{link} -> {target} loops (it is reached again through the links it leads to)")]
    Loop { link: String, target: String },
    #[error("more than {MAX_LINKS} symbolic links are followed from /{path}")]
    TooMany { path: String },
    #[error("the symbolic link /{link} is empty")]
    Empty { link: String },
    #[error("/{path} is {} where a directory is needed", .kind.describe())]
    NotADirectory { path: String, kind: NodeKind },
    #[error("/{path} (layer {layer} of the manifest) lies below /{link}, a symbolic link in a lower layer: containerd's overlayfs snapshotter shows it in a new directory that hides the link, umoci and the native snapshotter write it through the link; refusing rather than guessing which the container sees")]
    WrittenThrough {
        path: String,
        layer: usize,
        link: String,
    },
}

fn join(done: &[String], name: &str) -> String {
    let mut p = done.join("/");
    if !p.is_empty() {
        p.push('/');
    }
    p.push_str(name);
    p
}

/// Resolves `path` (relative to `/`), asking `lookup` what is at each ancestor, and following
/// every link there (a directory is resolved whole as `dir/.`). An ancestor that is a directory, or shows no entry (layers need not list
/// the parents of what they hold), is gone through as it is; a non-directory ancestor is
/// refused (the container gets `ENOTDIR`).
pub fn resolve(path: &str, lookup: impl Fn(&str) -> Node) -> Result<Resolved, LinkError> {
    let mut todo: VecDeque<String> = path
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    let mut done: Vec<String> = Vec::new();
    let mut via: Vec<(String, String)> = Vec::new();
    let mut states = BTreeSet::new();
    while let Some(c) = todo.pop_front() {
        match c.as_str() {
            "." => continue,
            ".." => {
                if done.pop().is_none() {
                    return Err(match via.last() {
                        Some((link, target)) => LinkError::LeavesRoot {
                            link: link.clone(),
                            target: target.clone(),
                        },
                        None => LinkError::PathLeavesRoot {
                            path: path.to_owned(),
                        },
                    });
                }
                continue;
            }
            _ => {}
        }
        let here = join(&done, &c);
        // The last component is not followed; `path/.` makes it an ancestor, which is.
        if todo.is_empty() {
            let node = lookup(&here);
            return Ok(Resolved {
                path: here,
                node,
                via,
            });
        }
        match lookup(&here) {
            // A directory known only from what lies below it (layers need not list parents).
            Node::Absent | Node::Dir => done.push(c),
            Node::Entry(kind) => return Err(LinkError::NotADirectory { path: here, kind }),
            Node::Link(target) => {
                let rest: Vec<&str> = todo.iter().map(String::as_str).collect();
                if !states.insert(format!("{here}\0{}", rest.join("/"))) {
                    return Err(LinkError::Loop { link: here, target });
                }
                if via.len() == MAX_LINKS {
                    return Err(LinkError::TooMany {
                        path: path.to_owned(),
                    });
                }
                if target.is_empty() {
                    return Err(LinkError::Empty { link: here });
                }
                if target.starts_with('/') {
                    done.clear();
                }
                for part in target.split('/').filter(|p| !p.is_empty()).rev() {
                    todo.push_front(part.to_owned());
                }
                via.push((here, target));
            }
        }
    }
    // A path ending in `.` or `..` (or the root itself): what its directory holds.
    let path = done.join("/");
    let node = if path.is_empty() {
        Node::Dir
    } else {
        lookup(&path)
    };
    Ok(Resolved { path, node, via })
}

/// What `layers` (top first) show at `path`: the top-most entry there that no layer above it
/// hides. Directories are known from scans that kept their index (scans for exact paths).
pub fn node_in(layers: &[Arc<LayerScan>], path: &str) -> (Node, Option<usize>) {
    for (i, layer) in layers.iter().enumerate() {
        let node = match layer.non_dir(path) {
            Some(NodeKind::Symlink) => match layer.link(path) {
                Some(to) => Node::Link(to.to_owned()),
                None => Node::Entry(NodeKind::Symlink),
            },
            Some(k) => Node::Entry(k),
            None if layer.is_dir(path) => Node::Dir,
            None => continue,
        };
        // Hidden here is hidden in every layer below as well.
        if hider_in(&layers[..i], path).is_some() {
            return (Node::Absent, None);
        }
        return (node, Some(i));
    }
    (Node::Absent, None)
}

impl LayerScan {
    /// For a scan resolving exact paths: indexes a directory, or keeps a link's target (the
    /// last entry at a path is what extraction leaves). Returns the bytes to charge to the
    /// budgets and those given back.
    pub(super) fn learn(&mut self, path: &str, dir: bool, link: Option<String>) -> (u64, u64) {
        let key = index_key(path);
        let freed = self
            .links
            .remove(&key)
            .map_or(0, |old| old.len() as u64 + ITEM_OVERHEAD);
        let take = if dir {
            self.dirs.push(key);
            INDEX_ENTRY
        } else if let Some(to) = link {
            let cost = to.len() as u64 + ITEM_OVERHEAD;
            self.links.insert(key, to);
            cost
        } else {
            0
        };
        (take, freed)
    }
}

impl Descent {
    /// What the container sees at `path` (links at it not followed), from every layer read.
    pub fn node(&self, path: &str) -> Node {
        node_in(self.overlay.layers(), path).0
    }

    /// The manifest index of the layer holding the top-most visible entry at `path`.
    pub fn holder(&self, path: &str) -> Option<usize> {
        node_in(self.overlay.layers(), path)
            .1
            .and_then(|i| self.read.get(i).copied())
    }

    /// `path` resolved over every layer read. A kept entry that a layer above a followed link
    /// holds below the link's path is refused: runtimes disagree on where it lands.
    pub fn resolve(&self, path: &str) -> Result<Resolved, LinkError> {
        let r = resolve(path, |p| self.node(p))?;
        for (link, _) in &r.via {
            let Some(at) = self.holder(link) else {
                continue;
            };
            if let Some((layer, e)) = self.kept_below(link).into_iter().find(|(i, _)| *i > at) {
                return Err(LinkError::WrittenThrough {
                    path: e.path.clone(),
                    layer,
                    link: link.clone(),
                });
            }
        }
        Ok(r)
    }

    /// The exact paths whose files lie elsewhere, through links, and were not kept by the walk:
    /// (manifest index of the layer holding the file's top-most copy, its real path), for a
    /// second read of just those layers. Paths that cannot be resolved are left to the patch
    /// to refuse.
    pub fn to_read_again(&self) -> Vec<(usize, String)> {
        let mut out: Vec<(usize, String)> = Vec::new();
        if self.refusal.is_some() {
            return out;
        }
        for p in &self.paths {
            let Ok(r) = self.resolve(p) else { continue };
            if r.path == *p || !matches!(r.node, Node::Entry(_) | Node::Link(_)) {
                continue;
            }
            let kept = self
                .hits
                .iter()
                .flat_map(|(_, v)| v)
                .any(|e| e.path == r.path);
            if let (false, Some(index)) = (kept, self.holder(&r.path)) {
                if !out.iter().any(|(_, q)| *q == r.path) {
                    out.push((index, r.path));
                }
            }
        }
        out
    }

    /// Adds the entries a second read of layer `index` found at resolved paths, as visible copies.
    pub fn add_resolved(&mut self, index: usize, entries: &[FileEntry]) {
        if entries.is_empty() {
            return;
        }
        match self.hits.iter_mut().find(|(i, _)| *i == index) {
            Some((_, v)) => {
                for e in entries {
                    if !v.iter().any(|h| h.path == e.path) {
                        v.push(e.clone());
                    }
                }
            }
            None => {
                // Hits are kept top first, that is by decreasing manifest index.
                let at = self.hits.partition_point(|(i, _)| *i > index);
                self.hits.insert(at, (index, entries.to_vec()));
            }
        }
    }

    /// The entries a kept layer holds below `dir` (for a link an upper layer writes through).
    pub fn kept_below(&self, dir: &str) -> Vec<(usize, &FileEntry)> {
        let prefix = format!("{dir}/");
        self.hits
            .iter()
            .flat_map(|(i, v)| v.iter().map(move |e| (*i, e)))
            .filter(|(_, e)| e.path.starts_with(&prefix))
            .collect()
    }
}
