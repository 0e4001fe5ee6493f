//! What a layer scan keeps in memory, counted against the budgets: the per-layer and per-run
//! caps of `types.rs`, and distribution metadata apart; a scan passing one is refused with one
//! line saying what it kept.

use std::io::{self, Read};
use std::sync::Arc;

use super::overlay::LayerScan;
use super::types::*;

/// What a scan kept, by kind, for the message when a budget is passed.
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) targets: u64,
    pub(super) files: u64,
    pub(super) pycs: u64,
    pub(super) whiteouts: u64,
    pub(super) indexed: u64,
    pub(super) links: u64,
    pub(super) dists: u64,
}

/// Counts the bytes a layer scan keeps against the per-layer cap and the run's budget.
pub(super) struct Keeper<'a> {
    pub(super) run: &'a Budget,
    pub(super) kept: u64,
    /// Distribution metadata kept, counted apart (`Budget::take_dist`).
    pub(super) dist_kept: u64,
    pub(super) counts: Counts,
}

impl Keeper<'_> {
    /// Takes `n` bytes, or says (as a refusal) which cap it would pass.
    pub(super) fn take(&mut self, n: u64, digest: &str) -> Result<(), String> {
        if self.kept + n > MAX_KEPT_PER_LAYER {
            return Err(format!(
                "layer {digest}: the scan would keep more than the {} kept per layer ({}); refusing rather than holding it in memory",
                mib(MAX_KEPT_PER_LAYER),
                self.what()
            ));
        }
        if let Err(used) = self.run.take(n) {
            return Err(format!(
                "layer {digest}: this run already keeps {} from the layers it read, and this layer would pass the {} kept per run ({}); refusing rather than holding it in memory",
                mib(used),
                mib(MAX_KEPT_PER_RUN),
                self.what()
            ));
        }
        self.kept += n;
        Ok(())
    }

    pub(super) fn give_back(&mut self, n: u64) {
        let n = n.min(self.kept);
        self.kept -= n;
        self.run.give_back(n);
    }

    /// Takes `n` bytes of distribution metadata, or says which cap it would pass.
    pub(super) fn take_dist(&mut self, n: u64, digest: &str) -> Result<(), String> {
        if let Err(used) = self.run.take_dist(n) {
            return Err(format!(
                "layer {digest}: the metadata of installed distributions (*.dist-info) this run keeps would pass {} ({} in use, {} dist-info file(s) kept from this layer); refusing rather than holding it in memory",
                mib(self.run.dist_cap()),
                mib(used),
                self.counts.dists
            ));
        }
        self.dist_kept += n;
        Ok(())
    }

    pub(super) fn give_back_dist(&mut self, n: u64) {
        let n = n.min(self.dist_kept);
        self.dist_kept -= n;
        self.run.give_back_dist(n);
    }

    /// Gives back everything this layer kept (a refused or failed scan keeps nothing).
    pub(super) fn give_back_all(&mut self) {
        self.give_back(self.kept);
        self.give_back_dist(self.dist_kept);
    }

    pub(super) fn what(&self) -> String {
        let c = &self.counts;
        format!(
            "{} kept so far: {} cop{} of the target, {} version or guard file(s), {} .pyc path(s), {} whiteout(s), {} path(s) indexed, {} link target(s)",
            mib(self.kept),
            c.targets,
            if c.targets == 1 { "y" } else { "ies" },
            c.files,
            c.pycs,
            c.whiteouts,
            c.indexed,
            c.links
        )
    }
}

pub(super) fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
}

/// Why the entry loop stopped early.
pub(super) enum Stop {
    Refused(String),
    Io(io::Error),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Self {
        Stop::Io(e)
    }
}

/// Keeps one metadata file of a `*.dist-info` directory, within the distribution budget.
pub(super) fn keep_dist<R: Read>(
    entry: &mut tar::Entry<R>,
    path: String,
    scan: &mut LayerScan,
    keeper: &mut Keeper<'_>,
    digest: &str,
) -> Result<(), Stop> {
    let size = entry.size();
    if size > MAX_DIST_FILE {
        return Err(Stop::Refused(format!(
            "layer {digest}: /{path} is {size} bytes, more than the {} kept per distribution metadata file; refusing rather than holding it in memory",
            mib(MAX_DIST_FILE)
        )));
    }
    keeper.counts.dists += 1;
    let cost = size + path.len() as u64 + ITEM_OVERHEAD;
    keeper.take_dist(cost, digest).map_err(Stop::Refused)?;
    let mut buf = Vec::with_capacity(size as usize);
    entry.take(size).read_to_end(&mut buf)?;
    if let Some(old) = scan.files.insert(path.clone(), Arc::new(buf)) {
        keeper.give_back_dist(old.len() as u64 + path.len() as u64 + ITEM_OVERHEAD);
    }
    Ok(())
}

/// Reads an entry's content into memory when the caps allow it.
pub(super) fn read_kept<R: Read>(
    entry: &mut tar::Entry<R>,
    path: &str,
    digest: &str,
    keeper: &mut Keeper<'_>,
    count: impl FnOnce(&mut Counts),
) -> Result<Vec<u8>, Stop> {
    let size = entry.size();
    if size > MAX_KEPT_FILE {
        return Err(Stop::Refused(format!(
            "layer {digest}: /{path} is {size} bytes, more than the {} kept per file; refusing rather than holding it in memory",
            mib(MAX_KEPT_FILE)
        )));
    }
    count(&mut keeper.counts);
    keeper
        .take(size + path.len() as u64 + ITEM_OVERHEAD, digest)
        .map_err(Stop::Refused)?;
    let mut buf = Vec::with_capacity(size as usize);
    entry.take(size).read_to_end(&mut buf)?;
    Ok(buf)
}
