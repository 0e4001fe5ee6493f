//! What the container sees of an image, read from its layers top-down: the run's layer reader
//! ([`Layers`]: each layer read once per run, through the scan cache, its kept bytes charged
//! to the run's budget) and [`Visible`], the overlay tree a patch decides on. `plan` and
//! `verify` both read images through here, so neither depends on the other.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::OnceCell;
use tokio_util::io::SyncIoBridge;

use crate::media::{layer_compression, Compression, Descriptor};
use crate::patch::{Change, Layered, Patch, Tree};
use crate::progress;
use crate::registry::{Registry, RegistryError, Repo};
use crate::scan::{self, Budget, Descent, FileEntry, LayerScan, ScanError, Wanted};
use crate::scan_cache::ScanCache;

type ScanCell = Arc<OnceCell<Arc<LayerScan>>>;

/// Why a layer could not be read for a scan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The layer could not be read to its end, or its digest or size is wrong.
    #[error("reading {repo}: {error}")]
    Scan { repo: String, error: ScanError },
    #[error("layer scan task failed: {0}")]
    Task(String),
}

/// The layer scans of one run, by layer digest and what was looked for: platforms and tags
/// that share a layer read it once (a platform arriving while another reads it waits). Owned
/// by the run, so two runs in one process (tests, a library user) never share memory caps.
#[derive(Debug)]
pub struct Layers {
    scans: Mutex<HashMap<(String, String), ScanCell>>,
    /// What the cached layer scans of this run keep in memory together.
    kept: Arc<Budget>,
    /// Where scans are kept between runs (none for `verify`).
    cache: ScanCache,
}

impl Default for Layers {
    fn default() -> Self {
        Layers::new(ScanCache::off())
    }
}

impl Layers {
    /// A run's layer reader keeping its scans in `cache`.
    pub fn new(cache: ScanCache) -> Self {
        Layers {
            scans: Mutex::default(),
            kept: Arc::new(Budget::new(scan::MAX_KEPT_PER_RUN)),
            cache,
        }
    }
}

/// What a set of patches needs a scan to show, and where it may stop.
#[derive(Debug, Clone)]
pub struct Search {
    pub wanted: Wanted,
    /// The suffixes whose top-most visible copies end a top-down scan.
    pub anchors: Vec<String>,
}

impl Search {
    /// The union of what each patch reads ([`crate::patch::PatchKind::wanted`]), its anchors
    /// and the packages whose versions it tests.
    pub fn of<'p>(patches: impl IntoIterator<Item = &'p Patch>) -> Self {
        let mut wanted = Wanted::default();
        let mut anchors = Vec::new();
        let add = |list: &mut Vec<String>, v: String| {
            if !list.contains(&v) {
                list.push(v);
            }
        };
        for p in patches {
            let kind = p.kind();
            for w in kind.wanted() {
                add(&mut wanted.targets, w);
            }
            for a in kind.anchors() {
                add(&mut anchors, a);
            }
            for path in kind.paths() {
                add(&mut wanted.paths, path);
            }
            if let Some(pkg) = &p.meta().package {
                add(&mut wanted.packages, pkg.clone());
            }
        }
        Search { wanted, anchors }
    }
}

impl Layers {
    /// Reads layers from the top down, with overlay semantics ([`scan::Descent`]), until
    /// `hits_needed` layers holding a visible copy of each anchor have been read, a layer or
    /// the overlay refuses the image, or the bottom. With nothing to look for, reads nothing.
    /// Registry and integrity failures are errors.
    pub async fn scan_down(
        &self,
        reg: &Registry,
        repo: &Repo,
        layers: &[Descriptor],
        search: &Search,
        hits_needed: usize,
        label: &str,
    ) -> Result<Descent, Error> {
        let wanted = &search.wanted;
        let mut descent = Descent::new(&wanted.targets, &search.anchors).with_paths(&wanted.paths);
        if wanted.targets.is_empty() && wanted.paths.is_empty() {
            return Ok(descent);
        }
        for (index, desc) in layers.iter().enumerate().rev() {
            let Some(compression) = layer_compression(&desc.media_type) else {
                descent.refuse(format!(
                    "layer {} has media type {:?}, which this tool cannot read",
                    desc.digest, desc.media_type
                ));
                break;
            };
            let layer = self
                .layer(reg, repo, desc, compression, wanted, label)
                .await?;
            if descent.push(index, layer, hits_needed) {
                break;
            }
        }
        self.read_through_links(reg, repo, layers, &mut descent, label)
            .await?;
        Ok(descent)
    }

    /// The second read of a walk for exact paths: each file reached through a link, at a path
    /// the walk did not keep, is read from the one layer holding its top-most copy
    /// ([`Descent::to_read_again`]); nothing else is read again.
    async fn read_through_links(
        &self,
        reg: &Registry,
        repo: &Repo,
        layers: &[Descriptor],
        descent: &mut Descent,
        label: &str,
    ) -> Result<(), Error> {
        let mut by_layer: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (index, path) in descent.to_read_again() {
            by_layer.entry(index).or_default().push(path);
        }
        for (index, paths) in by_layer.into_iter().rev() {
            let Some(desc) = layers.get(index) else {
                continue;
            };
            let Some(compression) = layer_compression(&desc.media_type) else {
                continue;
            };
            let wanted = Wanted {
                resolved: paths.clone(),
                ..Wanted::default()
            };
            let layer = self
                .layer(reg, repo, desc, compression, &wanted, label)
                .await?;
            if let Some(why) = &layer.refusal {
                descent.refuse(why.clone());
                break;
            }
            let found: Vec<FileEntry> = layer
                .targets
                .iter()
                .filter(|e| paths.contains(&e.path))
                .cloned()
                .collect();
            descent.bytes_scanned += layer.compressed_bytes;
            descent.add_resolved(index, &found);
        }
        Ok(())
    }

    /// One layer's scan, from this run's cache or read now.
    async fn layer(
        &self,
        reg: &Registry,
        repo: &Repo,
        desc: &Descriptor,
        compression: Compression,
        wanted: &Wanted,
        label: &str,
    ) -> Result<Arc<LayerScan>, Error> {
        let key = (desc.digest.clone(), crate::scan_cache::wanted_key(wanted));
        let cell = {
            let mut map = self.scans.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(key).or_default().clone()
        };
        let mut fresh = false;
        let scan = cell
            .get_or_try_init(|| async {
                fresh = true;
                // A cached scan holds its kept bytes like a fresh one: charged to the run,
                // and read afresh (to be refused as such) when the budget cannot hold it.
                if let Some(hit) = self
                    .cache
                    .load(desc, compression, wanted)
                    .filter(|h| self.kept.take(h.kept).is_ok())
                {
                    return Ok(Arc::new(hit));
                }
                let reader = reg.blob_reader(repo, desc).await?;
                let short = desc.digest.get(7..19).unwrap_or(&desc.digest);
                let task = progress::start(format!("{label} {short}"), desc.size);
                let counted = progress::Reader::new(SyncIoBridge::new(reader), task);
                let (d, w, kept) = (desc.clone(), wanted.clone(), self.kept.clone());
                let layer = tokio::task::spawn_blocking(move || {
                    scan::scan_layer(counted, &d, compression, &w, &kept)
                })
                .await
                .map_err(|e| Error::Task(e.to_string()))?
                .map_err(|error| Error::Scan {
                    repo: repo.to_string(),
                    error,
                })?;
                tracing::debug!(
                    "{label}: read layer {} ({} bytes)",
                    desc.digest,
                    layer.compressed_bytes
                );
                self.cache.store(desc, compression, wanted, &layer);
                Ok::<_, Error>(Arc::new(layer))
            })
            .await?
            .clone();
        if !fresh {
            tracing::debug!("{label}: layer {} already read in this run", desc.digest);
        }
        Ok(scan)
    }
}

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
}

impl<'a> Visible<'a> {
    pub fn new(descent: &'a Descent, config: Value) -> Self {
        Visible {
            descent,
            config,
            changed: BTreeMap::new(),
            added: 0..0,
        }
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
                // that streams files does not hand them to content-reading kinds).
                Change::Stream(s) => {
                    self.changed
                        .insert(s.entry.path.clone(), Some(s.entry.clone()));
                }
            }
        }
        if let Some(c) = config {
            self.config = c.clone();
        }
    }

    /// The config as the patches so far left it.
    pub fn current_config(&self) -> &Value {
        &self.config
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
