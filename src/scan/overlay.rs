//! What the layers show together: each layer's findings (`LayerScan`), what a layer hides of
//! those below (`Overlay`), and the top-down walk over an image (`Descent`).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::types::*;

/// A non-directory entry, as far as hiding a lower directory goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    File,
    Symlink,
    Hardlink,
    Device,
    Fifo,
    Other,
}

impl NodeKind {
    pub(super) fn of(t: tar::EntryType) -> NodeKind {
        match t {
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                NodeKind::File
            }
            tar::EntryType::Symlink => NodeKind::Symlink,
            tar::EntryType::Link => NodeKind::Hardlink,
            tar::EntryType::Char | tar::EntryType::Block => NodeKind::Device,
            tar::EntryType::Fifo => NodeKind::Fifo,
            _ => NodeKind::Other,
        }
    }

    pub(super) fn code(self) -> u64 {
        match self {
            NodeKind::File => 1,
            NodeKind::Symlink => 2,
            NodeKind::Hardlink => 3,
            NodeKind::Device => 4,
            NodeKind::Fifo => 5,
            NodeKind::Other => 6,
        }
    }

    pub(super) fn from_code(c: u64) -> NodeKind {
        match c {
            1 => NodeKind::File,
            2 => NodeKind::Symlink,
            3 => NodeKind::Hardlink,
            4 => NodeKind::Device,
            5 => NodeKind::Fifo,
            _ => NodeKind::Other,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            NodeKind::File => "a regular file",
            NodeKind::Symlink => "a symbolic link",
            NodeKind::Hardlink => "a hard link",
            NodeKind::Device => "a device node",
            NodeKind::Fifo => "a FIFO",
            NodeKind::Other => "a non-directory entry",
        }
    }
}

/// The key of a path in a layer's index of non-directory entries: a 61-bit hash with the kind
/// in the low bits. Hashes keep the index at 8 bytes an entry whatever the path lengths; a
/// collision (odds about 1 in 10^13 for a large image) can only refuse, never patch.
pub(super) fn index_key(path: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    h.finish() & !7
}

/// What one layer holds of interest, and its verified digest.
#[derive(Debug, Clone, Default)]
pub struct LayerScan {
    /// The layer's digest, for messages.
    pub digest: String,
    /// The target entries, one per path (a later entry of the same path replaces an earlier one,
    /// as extraction does).
    pub targets: Vec<FileEntry>,
    /// `__pycache__/<stem>.*.pyc` paths beside any copy of the target.
    pub pycs: BTreeSet<String>,
    /// Small files: companions and version files, by full path.
    pub files: BTreeMap<String, Arc<Vec<u8>>>,
    /// Paths this layer whites out in the layers below (`.wh.NAME`).
    pub whiteouts: BTreeSet<String>,
    /// Directories this layer makes opaque (`.wh..wh..opq`).
    pub opaques: BTreeSet<String>,
    /// Sorted [`index_key`]s (with kinds) of every non-directory entry; empty for a layer holding
    /// the target, where a top-down scan stops.
    pub(super) non_dirs: Vec<u64>,
    /// The target of every symbolic link, by its path's [`index_key`] (kept only by a scan for
    /// exact paths, which resolves them: `scan::links`).
    pub links: BTreeMap<u64, String>,
    /// Sorted [`index_key`]s of every directory entry (kept with `links`): an upper directory
    /// replaces a lower link.
    pub dirs: Vec<u64>,
    /// The Python 3 minor versions this layer's paths name (`lib/python3.N/`, `bin/python3.N`):
    /// which interpreters the image can run, for bytecode names (`patch::bytecode`).
    pub pythons: BTreeSet<u32>,
    /// Why this layer cannot be used (an unsafe path, a budget exceeded); then nothing else in
    /// it is kept.
    pub refusal: Option<String>,
    /// Bytes kept, as counted against the budgets.
    pub kept: u64,
    pub compressed_bytes: u64,
}

impl LayerScan {
    /// The index of non-directory entries, for the scan cache to keep (`scan_cache.rs`).
    pub fn index_keys(&self) -> &[u64] {
        &self.non_dirs
    }

    /// Restores the index of a scan the scan cache kept; `keys` sorted, as
    /// [`Self::index_keys`] gives them.
    pub fn set_index_keys(&mut self, keys: Vec<u64>) {
        self.non_dirs = keys;
    }

    /// The target of the symbolic link this layer holds at `path`, if it kept links.
    pub fn link(&self, path: &str) -> Option<&str> {
        self.links.get(&index_key(path)).map(String::as_str)
    }

    /// Whether this layer holds a directory entry at `path` (known when it kept links).
    pub fn is_dir(&self, path: &str) -> bool {
        self.dirs.binary_search(&index_key(path)).is_ok()
    }

    /// The kind of the non-directory entry this layer holds at `path`, if any.
    pub fn non_dir(&self, path: &str) -> Option<NodeKind> {
        let key = index_key(path);
        let i = self.non_dirs.partition_point(|k| *k < key);
        self.non_dirs
            .get(i)
            .filter(|k| **k & !7 == key)
            .map(|k| NodeKind::from_code(*k & 7))
    }
}

/// How an upper layer hides a lower path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HiddenBy {
    /// A `.wh.` entry at the path or one of its ancestors.
    Whiteout,
    /// An opaque directory at one of its ancestors.
    Opaque,
    /// A non-directory entry at one of its ancestors: the lower tree is gone from view.
    NonDir(NodeKind),
}

/// Which upper entry hides a lower path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    /// The path of the hiding entry (the whited-out path, the opaque or non-directory ancestor).
    pub at: String,
    pub by: HiddenBy,
    /// The digest of the layer holding the hiding entry.
    pub layer: String,
}

impl std::fmt::Display for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (at, layer) = (&self.at, &self.layer);
        match &self.by {
            HiddenBy::Whiteout => write!(f, "a whiteout of /{at} in layer {layer}"),
            HiddenBy::Opaque => write!(f, "the opaque directory /{at} in layer {layer}"),
            HiddenBy::NonDir(k) => write!(f, "{} at /{at} in layer {layer}", k.describe()),
        }
    }
}

/// The layers above the one being looked at, top first: what they hide from it.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    upper: Vec<Arc<LayerScan>>,
}

/// `a/b/c` -> `a/b`, `a`, `` (the root).
pub(super) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(path);
    std::iter::from_fn(move || {
        let p = rest?;
        match p.rfind('/') {
            Some(i) => {
                rest = Some(&p[..i]);
                Some(&p[..i])
            }
            None => {
                rest = None;
                (!p.is_empty()).then_some("")
            }
        }
    })
}

impl Overlay {
    /// The top-most upper entry hiding `path`, if any: a whiteout of it or of an ancestor, an
    /// opaque ancestor, or a non-directory ancestor (symlink, file, link, device), which hides
    /// the lower tree in overlayfs and replaces it in umoci and containerd.
    pub fn hider(&self, path: &str) -> Option<Hidden> {
        hider_in(&self.upper, path)
    }

    /// True when an upper layer hides this path.
    pub fn hides(&self, path: &str) -> bool {
        self.hider(path).is_some()
    }

    /// Adds a scanned layer, which hides things only from the layers below it.
    pub fn absorb(&mut self, layer: Arc<LayerScan>) {
        self.upper.push(layer);
    }

    /// The layers laid so far, top first.
    pub fn layers(&self) -> &[Arc<LayerScan>] {
        &self.upper
    }
}

/// The top-most entry of `upper` (layers, top first) hiding `path`: see [`Overlay::hider`].
pub(super) fn hider_in(upper: &[Arc<LayerScan>], path: &str) -> Option<Hidden> {
    for layer in upper {
        let hidden = |at: &str, by| Hidden {
            at: at.to_owned(),
            by,
            layer: layer.digest.clone(),
        };
        if layer.whiteouts.contains(path) {
            return Some(hidden(path, HiddenBy::Whiteout));
        }
        for a in ancestors(path) {
            if layer.whiteouts.contains(a) {
                return Some(hidden(a, HiddenBy::Whiteout));
            }
            if layer.opaques.contains(a) {
                return Some(hidden(a, HiddenBy::Opaque));
            }
            if let Some(k) = layer.non_dir(a) {
                return Some(hidden(a, HiddenBy::NonDir(k)));
            }
        }
    }
    None
}

/// A top-down walk over an image's layers with overlay semantics: feed it layer scans from the
/// top, and it keeps what the container sees. Pure, so the overlay model is tested without a
/// registry; the reading itself is the caller's.
#[derive(Debug, Default)]
pub struct Descent {
    pub(super) overlay: Overlay,
    /// The wanted suffixes (empty: every target is one class, as for a single target).
    targets: Vec<String>,
    /// The exact paths wanted: a walk with any reads every layer, and a copy of one hidden by
    /// a link at an ancestor is left to link resolution (`scan::links`), not refused.
    pub(super) paths: Vec<String>,
    /// The walk keeps installed distributions' metadata (`Wanted::dists`): it reads every layer.
    pub dists: bool,
    /// The manifest index of each layer laid, top first (as the overlay holds them).
    pub(super) read: Vec<usize>,
    /// Every layer down to the bottom was read: what the indexes say is all there is.
    pub complete: bool,
    /// The Python 3 minor versions the layers read name.
    pub pythons: BTreeSet<u32>,
    /// The suffixes whose top-most visible copies end the walk (empty: any target does).
    anchors: Vec<String>,
    /// (index in the manifest, the visible target entries of that layer), top-most first.
    pub hits: Vec<(usize, Vec<FileEntry>)>,
    /// Visible `.pyc` files of the target's module, seen in any layer read.
    pub pycs: BTreeSet<String>,
    /// Visible small files (guards, version files), first copy top-down.
    pub files: BTreeMap<String, Arc<Vec<u8>>>,
    pub layers_scanned: usize,
    pub bytes_scanned: u64,
    /// Why the image cannot be patched as it is (a refused layer, a shadowed target, an
    /// unreadable layer); the walk stops there.
    pub refusal: Option<String>,
    /// The top-most copy of the target that an upper whiteout or opaque directory hides, and
    /// what hides it: the explanation when no copy is visible.
    pub hidden: Option<(String, String, Hidden)>,
}

impl Descent {
    /// A walk looking for `targets` that may stop once every one of `anchors` has been seen
    /// visible (in as many layers as [`Descent::push`] is told).
    pub fn new(targets: &[String], anchors: &[String]) -> Self {
        Descent {
            targets: targets.to_vec(),
            anchors: anchors.to_vec(),
            ..Default::default()
        }
    }

    /// The same walk, also looking for these exact paths (it then reads every layer).
    pub fn with_paths(mut self, paths: &[String]) -> Self {
        self.paths = paths.to_vec();
        self
    }

    /// The same walk, also keeping every visible `*.dist-info` metadata file (it then reads
    /// every layer, since any layer may install, upgrade or remove a distribution).
    pub fn with_dists(mut self, dists: bool) -> Self {
        self.dists = dists;
        self
    }

    /// The wanted suffix a path answers to (for a walk with no list: all one class).
    fn class_of<'a>(&'a self, path: &str) -> Option<&'a str> {
        self.targets
            .iter()
            .find(|t| has_suffix(path, t))
            .map(String::as_str)
    }

    /// Whether a visible copy of what `path` answers to was found in a layer above.
    fn seen_above(&self, path: &str) -> bool {
        let class = self.class_of(path);
        self.hits
            .iter()
            .flat_map(|(_, v)| v)
            .any(|h| self.class_of(&h.path) == class)
    }

    /// Whether every anchor has visible copies in `needed` layers (with no anchors: any
    /// target in `needed` layers).
    fn anchored(&self, needed: usize) -> bool {
        if self.anchors.is_empty() {
            return self.hits.len() >= needed;
        }
        self.anchors.iter().all(|a| {
            self.hits
                .iter()
                .filter(|(_, v)| v.iter().any(|h| has_suffix(&h.path, a)))
                .count()
                >= needed
        })
    }

    /// The visible entries of the top-most layer holding a copy of `suffix` (the copies a
    /// container sees; lower ones are older copies of the same file or other installs).
    pub fn visible(&self, suffix: &str) -> Vec<&FileEntry> {
        self.hits
            .iter()
            .map(|(_, v)| {
                v.iter()
                    .filter(|h| has_suffix(&h.path, suffix))
                    .collect::<Vec<_>>()
            })
            .find(|v| !v.is_empty())
            .unwrap_or_default()
    }

    /// Stops the walk with a refusal.
    pub fn refuse(&mut self, why: String) {
        self.refusal = Some(why);
    }

    /// Lays the next lower layer (`index` in the manifest) under those read; returns true when
    /// the walk is over: a refusal, or `hits_needed` layers holding a visible copy of each
    /// anchor.
    ///
    /// A copy of the target hidden by a non-directory ancestor (a symlink, a file, a link, a
    /// device) in a higher layer refuses the image when no visible copy was found above it:
    /// the container sees no such file there, and whatever a link points to is not patched
    /// through it. A copy hidden by a whiteout or an opaque directory is a deleted file, as
    /// the decoys of real images are; the walk goes on below it.
    pub fn push(&mut self, index: usize, layer: Arc<LayerScan>, hits_needed: usize) -> bool {
        self.layers_scanned += 1;
        self.bytes_scanned += layer.compressed_bytes;
        if let Some(why) = &layer.refusal {
            self.refusal = Some(why.clone());
            return true;
        }
        let mut visible = Vec::new();
        for t in &layer.targets {
            let exact = self.class_of(&t.path).is_none() && self.paths.contains(&t.path);
            match self.overlay.hider(&t.path) {
                None => visible.push(t.clone()),
                // What the container sees there instead is for link resolution to say.
                Some(_) if exact => {}
                Some(h) if !self.seen_above(&t.path) => {
                    if let HiddenBy::NonDir(_) = h.by {
                        self.refusal = Some(format!(
                            "/{} (layer {}) is shadowed by {h}: the container does not see it; refusing rather than patching through it",
                            t.path, layer.digest
                        ));
                        return true;
                    }
                    if self.hidden.is_none() {
                        self.hidden = Some((t.path.clone(), layer.digest.clone(), h));
                    }
                }
                Some(_) => {}
            }
        }
        for p in &layer.pycs {
            if !self.overlay.hides(p) {
                self.pycs.insert(p.clone());
            }
        }
        for (p, c) in &layer.files {
            if !self.files.contains_key(p) && !self.overlay.hides(p) {
                self.files.insert(p.clone(), c.clone());
            }
        }
        self.pythons.extend(&layer.pythons);
        self.overlay.absorb(layer);
        self.read.push(index);
        self.complete = index == 0;
        if !visible.is_empty() {
            self.hits.push((index, visible));
            // A walk for exact paths reads every layer: links anywhere below may lead elsewhere.
            return self.paths.is_empty()
                && !self.dists
                && self.anchored(hits_needed)
                && self.python_named();
        }
        // Found above, but which Python the image runs was still unknown there.
        self.paths.is_empty()
            && !self.dists
            && !self.hits.is_empty()
            && self.anchored(hits_needed)
            && self.python_named()
    }

    /// Whether the Python version of every module found is known, from its path or the layers
    /// read: a walk stopping without it could only hide bytecode of every version
    /// (`patch::bytecode`).
    fn python_named(&self) -> bool {
        !self.pythons.is_empty()
            || self
                .hits
                .iter()
                .flat_map(|(_, v)| v)
                .filter(|e| e.path.ends_with(".py"))
                .all(|e| {
                    e.path.split('/').any(|c| {
                        c.strip_prefix("python3.")
                            .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
                    })
                })
    }

    /// Why no copy of the target is visible, for a refusal or a verify problem.
    pub fn nothing_visible(&self, target: &str) -> String {
        match &self.hidden {
            Some((path, layer, h)) => format!(
                "no layer holds a visible **/{target}: /{path} (layer {layer}) is hidden by {h}"
            ),
            None => format!("no layer holds a visible **/{target}"),
        }
    }
}
