//! The run's layer reader ([`Layers`]: each layer read once per run, through the scan cache,
//! its kept bytes charged to the run's budget) and what a set of patches needs a scan to show
//! ([`Search`]).

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::stream::{FuturesOrdered, StreamExt};
use tokio::sync::{oneshot, OnceCell, OwnedSemaphorePermit, Semaphore};
use tokio_util::io::SyncIoBridge;

use crate::media::{layer_compression, Compression, Descriptor};
use crate::patch::Patch;
use crate::progress;
use crate::registry::{Registry, RegistryError, Repo};
use crate::scan::{self, Budget, Descent, FileEntry, LayerScan, ScanError, Wanted};
use crate::scan_cache::ScanCache;

type ScanCell = Arc<OnceCell<Arc<LayerScan>>>;
/// The hashes one second read of a layer found, by path.
pub(super) type HashCell = Arc<OnceCell<Arc<BTreeMap<String, String>>>>;

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
    /// Second reads that hash files (`Layers::hashes`), by layer digest and the paths hashed.
    pub(super) hashed: Mutex<HashMap<(String, String), HashCell>>,
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
            hashed: Mutex::default(),
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
            wanted.dists |= kind.distributions();
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
        let mut descent = Descent::new(&wanted.targets, &search.anchors)
            .with_paths(&wanted.paths)
            .with_dists(wanted.dists);
        if wanted.targets.is_empty() && wanted.paths.is_empty() && !wanted.dists {
            return Ok(descent);
        }
        // The layers down to the first one this tool cannot read, top first.
        let mut readable = Vec::new();
        for (index, desc) in layers.iter().enumerate().rev() {
            let Some(compression) = layer_compression(&desc.media_type) else {
                break;
            };
            readable.push((index, desc, compression));
        }
        let stopped = if wanted.reads_every_layer() {
            self.read_side_by_side(
                reg,
                repo,
                &readable,
                wanted,
                &mut descent,
                hits_needed,
                label,
            )
            .await?
        } else {
            let mut stopped = false;
            for &(index, desc, compression) in &readable {
                let layer = self
                    .layer(reg, repo, desc, compression, wanted, label)
                    .await?;
                if descent.push(index, layer, hits_needed) {
                    stopped = true;
                    break;
                }
            }
            stopped
        };
        if !stopped && readable.len() < layers.len() {
            let desc = &layers[layers.len() - 1 - readable.len()];
            descent.refuse(format!(
                "layer {} has media type {:?}, which this tool cannot read",
                desc.digest, desc.media_type
            ));
        }
        self.read_through_links(reg, repo, layers, &mut descent, label)
            .await?;
        Ok(descent)
    }

    /// Reads `readable` (top first) for a scan that reads every layer anyway, up to one layer
    /// per core at once ([`read_width`]), largest first: the largest layer's inflate is the
    /// scan's longest part, so it starts at once and the others fit beside it. The scans are
    /// laid over each other top first, as they would be read one by one; a read still under
    /// way when that stops (a refusal) is abandoned ([`Abandon`]). Whether it stopped.
    #[allow(clippy::too_many_arguments)]
    async fn read_side_by_side(
        &self,
        reg: &Registry,
        repo: &Repo,
        readable: &[(usize, &Descriptor, Compression)],
        wanted: &Wanted,
        descent: &mut Descent,
        hits_needed: usize,
        label: &str,
    ) -> Result<bool, Error> {
        let mut turns = Vec::with_capacity(readable.len());
        let mut reads: FuturesOrdered<_> = readable
            .iter()
            .map(|&(index, desc, compression)| {
                let (give, turn) = oneshot::channel::<OwnedSemaphorePermit>();
                turns.push((desc.size, give));
                async move {
                    // The turn is held until the read ends, not until its result is taken.
                    let _turn = turn.await;
                    let layer = self
                        .layer(reg, repo, desc, compression, wanted, label)
                        .await;
                    (index, layer)
                }
            })
            .collect();
        // Stable: layers of one size keep their order, top first.
        turns.sort_by_key(|(size, _)| std::cmp::Reverse(*size));
        let giver = tokio::spawn(async move {
            let gate = Arc::new(Semaphore::new(read_width()));
            for (_, give) in turns {
                let Ok(turn) = gate.clone().acquire_owned().await else {
                    return;
                };
                // A read no longer awaited: its turn comes straight back.
                let _ = give.send(turn);
            }
        });
        let mut stopped = false;
        while let Some((index, layer)) = reads.next().await {
            let layer = match layer {
                Ok(l) => l,
                Err(e) => {
                    giver.abort();
                    return Err(e);
                }
            };
            if descent.push(index, layer, hits_needed) {
                stopped = true;
                break;
            }
        }
        giver.abort();
        Ok(stopped)
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
    pub(super) async fn layer(
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
                let (abandon, counted) = Abandon::guard(counted);
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
                abandon.disarm();
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

/// How many layers a scan that reads every layer reads at once: the cores, within 2..=4 (two
/// already keep a small layer from waiting behind a large one; more only share the cores).
fn read_width() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4))
}

/// Ends a layer read whose scan is no longer awaited (a read under way when the scan above it
/// stopped): the blocking scan cannot be cancelled, so its reader fails at its next read
/// instead of reading the rest of the layer for nobody.
pub(super) struct Abandon {
    flag: Arc<AtomicBool>,
    armed: bool,
}

/// The reader side of [`Abandon`].
pub(super) struct Abandonable<R> {
    inner: R,
    abandoned: Arc<AtomicBool>,
}

impl Abandon {
    /// `reader`, failing once the returned guard is dropped before [`Abandon::disarm`].
    pub(super) fn guard<R: Read>(reader: R) -> (Abandon, Abandonable<R>) {
        let flag = Arc::new(AtomicBool::new(false));
        let reader = Abandonable {
            inner: reader,
            abandoned: flag.clone(),
        };
        (Abandon { flag, armed: true }, reader)
    }

    /// The read ended: dropping the guard now abandons nothing.
    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if self.armed {
            self.flag.store(true, Ordering::Relaxed);
        }
    }
}

impl<R: Read> Read for Abandonable<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.abandoned.load(Ordering::Relaxed) {
            return Err(std::io::Error::other(
                "the layer read was abandoned: the scan stopped above it",
            ));
        }
        self.inner.read(buf)
    }
}
