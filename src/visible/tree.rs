//! [`Visible`], the overlay tree of one image that patches decide on: what the scan found,
//! the installed distributions, the hashes of a second read, and the changes of the patches
//! stacked so far.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::patch::{Change, Dist, Layered, Tree};
use crate::scan::{self, Descent, FileEntry};

/// Keeps the visible `.pyc` files that belong to the module at `path`.
pub fn pycs_of(pycs: &std::collections::BTreeSet<String>, path: &str) -> Vec<String> {
    let Some(module) = path.strip_suffix(".py") else {
        return Vec::new();
    };
    let (dir, stem) = module.rsplit_once('/').unwrap_or(("", module));
    let prefix = if dir.is_empty() {
        format!("__pycache__/{stem}.")
    } else {
        format!("{dir}/__pycache__/{stem}.")
    };
    pycs.iter()
        .filter(|p| p.starts_with(&prefix))
        .cloned()
        .collect()
}

/// The overlay tree of one image that patches decide on: the top-most visible copies the scan
/// found, the small files it kept, the config, and the changes of the patches stacked so far
/// (so the second patch of a run sees what the first one wrote).
pub struct Visible<'a> {
    descent: &'a Descent,
    config: Value,
    /// Files written (`Some`) or hidden (`None`) by the patches applied so far.
    changed: BTreeMap<String, Option<FileEntry>>,
    /// For `verify`: the indexes of the layers this tool appended.
    added: std::ops::Range<usize>,
    /// The sha256 of visible files a second read hashed (`Layers::hashes`).
    hashes: BTreeMap<String, String>,
    /// The sha256 of each file the patches so far wrote.
    written: BTreeMap<String, String>,
}

impl<'a> Visible<'a> {
    pub fn new(descent: &'a Descent, config: Value) -> Self {
        Visible {
            descent,
            config,
            changed: BTreeMap::new(),
            added: 0..0,
            hashes: BTreeMap::new(),
            written: BTreeMap::new(),
        }
    }

    /// The walk the tree shows.
    pub fn descent(&self) -> &'a Descent {
        self.descent
    }

    /// Gives the tree the hashes a second read found (`Tree::hashed` answers from them).
    pub fn set_hashes(&mut self, hashes: BTreeMap<String, String>) {
        self.hashes = hashes;
    }

    /// The same tree, knowing which layers this tool appended (for `verify`).
    pub fn with_added(mut self, added: std::ops::Range<usize>) -> Self {
        self.added = added;
        self
    }

    /// Lays one patch's changes (and config) over the view.
    pub fn apply(&mut self, changes: &[Change], config: Option<&Value>) {
        for c in changes {
            match c {
                Change::Write(e) => {
                    self.changed.insert(e.path.clone(), Some(e.clone()));
                }
                Change::Whiteout(p) => {
                    self.changed.insert(p.clone(), None);
                }
                // The header only: a later patch sees the file there, not its bytes (a kind
                // that streams files does not hand them to content-reading kinds), but for the
                // small metadata of a distribution, which `dists` shows.
                Change::Stream(s) => {
                    let mut e = s.entry.clone();
                    if self.descent.dists && scan::is_dist_file(&e.path) {
                        e.content = Arc::new(read_streamed(s));
                    }
                    self.changed.insert(e.path.clone(), Some(e));
                }
            }
            match c.written_sha256() {
                Some(h) => self.written.insert(c.path().to_owned(), h),
                None => self.written.remove(c.path()),
            };
        }
        if let Some(c) = config {
            self.config = c.clone();
        }
    }

    /// The config as the patches so far left it.
    pub fn current_config(&self) -> &Value {
        &self.config
    }

    /// Whether the patches so far hid `path` (a whiteout of it or of an ancestor).
    fn hidden_now(&self, path: &str) -> bool {
        if matches!(self.changed.get(path), Some(None)) {
            return true;
        }
        let mut up = path;
        while let Some((parent, _)) = up.rsplit_once('/') {
            if matches!(self.changed.get(parent), Some(None)) {
                return true;
            }
            up = parent;
        }
        false
    }

    /// What is at `path` once the changes of the patches so far are laid over the layers.
    fn node_now(&self, path: &str) -> scan::Node {
        match self.changed.get(path) {
            Some(Some(_)) => return scan::Node::Entry(scan::NodeKind::File),
            Some(None) => return scan::Node::Absent,
            None => {}
        }
        let mut up = path;
        while let Some((parent, _)) = up.rsplit_once('/') {
            if matches!(self.changed.get(parent), Some(None)) {
                return scan::Node::Absent;
            }
            up = parent;
        }
        self.descent.node(path)
    }
}

impl Tree for Visible<'_> {
    fn find(&self, suffix: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .descent
            .visible(suffix)
            .into_iter()
            .map(|e| e.path.clone())
            .filter(|p| !matches!(self.changed.get(p), Some(None)))
            .collect();
        for (p, c) in &self.changed {
            if c.is_some() && scan::has_suffix(p, suffix) && !out.contains(p) {
                out.push(p.clone());
            }
        }
        out.sort();
        out
    }

    fn file(&self, path: &str) -> Result<Option<FileEntry>, crate::patch::Error> {
        if let Some(c) = self.changed.get(path) {
            return Ok(c.clone());
        }
        Ok(self
            .descent
            .hits
            .iter()
            .find_map(|(_, v)| v.iter().rev().find(|e| e.path == path))
            .cloned())
    }

    fn dists(&self) -> Vec<Dist> {
        if !self.descent.dists {
            return Vec::new();
        }
        let mut by_dir: BTreeMap<String, BTreeMap<String, Arc<Vec<u8>>>> = BTreeMap::new();
        let mut add = |path: &str, content: Arc<Vec<u8>>| {
            if let Some((dir, name)) = path.rsplit_once('/') {
                by_dir
                    .entry(dir.to_owned())
                    .or_default()
                    .insert(name.to_owned(), content);
            }
        };
        for (p, c) in &self.descent.files {
            if scan::is_dist_file(p) && !self.changed.contains_key(p) && !self.hidden_now(p) {
                add(p, c.clone());
            }
        }
        for (p, c) in &self.changed {
            if let Some(e) = c {
                if scan::is_dist_file(p) && !self.hidden_now(p) {
                    add(p, e.content.clone());
                }
            }
        }
        by_dir
            .into_iter()
            .map(|(dir, files)| Dist { dir, files })
            .collect()
    }

    fn hashed(&self, path: &str) -> Option<String> {
        if let Some(c) = self.changed.get(path) {
            return c.as_ref().and(self.written.get(path).cloned());
        }
        if self.hidden_now(path) {
            return None;
        }
        self.hashes.get(path).cloned()
    }

    fn stale_bytecode(&self, path: &str) -> Vec<String> {
        let mut out: Vec<String> = pycs_of(&self.descent.pycs, path)
            .into_iter()
            .filter(|p| !self.changed.contains_key(p))
            .collect();
        // Every layer read: its index tells every name that is there.
        if self.descent.complete {
            for c in crate::patch::bytecode::candidates(path) {
                let file = matches!(self.descent.node(&c), scan::Node::Entry(_));
                if file && !self.changed.contains_key(&c) && !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        out
    }

    fn resolve(&self, path: &str) -> Result<scan::Resolved, scan::LinkError> {
        let over_descent = self.descent.resolve(path)?;
        if self.changed.is_empty() {
            return Ok(over_descent);
        }
        // What the patches before this one wrote or hid is laid over the layers.
        scan::resolve(path, |p| self.node_now(p))
    }

    fn bytecode_below(&self) -> crate::patch::tree::Below {
        if self.descent.complete {
            crate::patch::tree::Below::Known
        } else {
            crate::patch::tree::Below::Unread(self.descent.pythons.iter().copied().collect())
        }
    }

    fn package_version(&self, root: &str, package: &str) -> Option<String> {
        let dist = package.replace('-', "_");
        let files = &self.descent.files;
        let meta = files
            .iter()
            .find(|(p, _)| crate::patch::tree::is_dist_metadata(root, package, p));
        let version_py = crate::patch::tree::version_py(root, package);
        meta.and_then(|(p, c)| scan::version_from_file(p, c))
            .or_else(|| {
                files
                    .get(&version_py)
                    .and_then(|c| scan::version_from_file(&version_py, c))
            })
            // Any dist-info of that package the scan saw (an editable checkout's lives
            // elsewhere).
            .or_else(|| {
                files
                    .iter()
                    .find(|(p, _)| {
                        p.ends_with(".dist-info/METADATA")
                            && p.rsplit('/')
                                .nth(1)
                                .is_some_and(|d| d.starts_with(&format!("{dist}-")))
                    })
                    .and_then(|(p, c)| scan::version_from_file(p, c))
            })
    }

    fn config(&self) -> Option<&Value> {
        Some(&self.config)
    }

    fn explain_missing(&self, suffix: &str) -> String {
        self.descent.nothing_visible(suffix)
    }
}

impl Layered for Visible<'_> {
    fn copies(&self, suffix: &str) -> Vec<(usize, Vec<FileEntry>)> {
        self.descent
            .hits
            .iter()
            .map(|(i, v)| {
                let found: Vec<FileEntry> = v
                    .iter()
                    .filter(|e| scan::has_suffix(&e.path, suffix))
                    .cloned()
                    .collect();
                (*i, found)
            })
            .filter(|(_, v)| !v.is_empty())
            .collect()
    }

    fn added(&self) -> std::ops::Range<usize> {
        self.added.clone()
    }

    fn refusal(&self) -> Option<&str> {
        self.descent.refusal.as_deref()
    }
}

/// The bytes of a small streamed file (a distribution's metadata a patch writes), for the
/// patches after it; bounded like the scan's own copies, empty when it cannot be read.
fn read_streamed(s: &crate::patch::Streamed) -> Vec<u8> {
    use std::io::Read;
    let mut buf = Vec::new();
    if s.size > scan::MAX_DIST_FILE {
        tracing::warn!(
            "/{}: {} bytes of distribution metadata not read for later patches",
            s.entry.path,
            s.size
        );
        return buf;
    }
    let read = (s.open)().and_then(|r| r.take(s.size).read_to_end(&mut buf));
    if let Err(e) = read {
        tracing::warn!("/{}: cannot read for later patches: {e}", s.entry.path);
        buf.clear();
    }
    buf
}
