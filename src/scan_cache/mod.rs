//! The scan cache: what a layer scan found, kept on disk, so `apply` after `plan` (or a second
//! `plan`) reads no layer again; on real runner images that is tens of GB per backend.
//!
//! An entry is keyed by the layer (digest, size, compression), by what was looked for (the
//! patch's target, guards and package) and by the build of this tool (a scan's meaning, and
//! the hash of its entry index, may change between builds), and holds only what the scan
//! found: the target entries with their headers and content, the `.pyc` paths, the few kept
//! files, the whiteouts and opaque directories, the index of non-directory entries (hashes,
//! for overlay hiding), a refusal if the layer was unusable, and the layer's size. A scan of any size is kept (a
//! distributions scan holds every `RECORD`, torch's among them); the folder is bounded on disk
//! (least recently used entries go first). An entry is written only after the layer was read
//! to its end and its digest and size checked (`scan::scan_layer` returned). On reading, an entry must name
//! the same layer and the same key and carry the sha256 of its own body; anything else (a
//! truncated, edited or foreign file, another format) is ignored, the layer is read again,
//! and the entry rewritten. The checksum detects corruption and mix-ups, not a deliberate
//! forgery: the cache directory is trusted as much as the user's other files.
//!
//! `plan` and `apply` use it (`--cache-dir`, default `$XDG_CACHE_HOME/runner-patch/scans` or
//! `~/.cache/runner-patch/scans`; `--no-cache`); `verify` never does, so its checks stay
//! independent of earlier runs.

use std::path::{Path, PathBuf};

use crate::media::{Compression, Descriptor};
use crate::scan::{LayerScan, Wanted};

/// What the entries of one cache folder may take on disk together, unless
/// `RUNNER_PATCH_SCAN_CACHE_MAX_MB` says otherwise: past it, the least recently used entries
/// are removed after a store (down to nine tenths of it).
pub const DEFAULT_MAX_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// The default cache folder: under the user's cache directory, when there is one.
pub fn default_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("runner-patch").join("scans"))
}

/// Where a run keeps its scans, if anywhere: owned by the run's layer reader, so two runs in
/// one process (tests, a library user) each have their own.
#[derive(Debug, Clone, Default)]
pub struct ScanCache {
    dir: Option<PathBuf>,
}

impl ScanCache {
    /// `dir`, else the default; `off` (`--no-cache`) keeps nothing.
    pub fn at(off: bool, dir: Option<PathBuf>) -> Self {
        let dir = if off { None } else { dir.or_else(default_dir) };
        match &dir {
            Some(d) => tracing::debug!("scan cache in {}", d.display()),
            None => tracing::debug!("no scan cache"),
        }
        ScanCache { dir }
    }

    /// No cache (what `verify` uses, so its checks stay independent of earlier runs).
    pub fn off() -> Self {
        ScanCache { dir: None }
    }

    /// The cached scan of a layer, when a valid entry for exactly this layer and key exists.
    pub fn load(
        &self,
        desc: &Descriptor,
        compression: Compression,
        wanted: &Wanted,
    ) -> Option<LayerScan> {
        load(self.dir.as_deref()?, desc, compression, wanted)
    }

    /// Records a scan. Call only with the result of a complete, verified read of the layer.
    pub fn store(
        &self,
        desc: &Descriptor,
        compression: Compression,
        wanted: &Wanted,
        scan: &LayerScan,
    ) {
        if let Some(dir) = &self.dir {
            store(dir, desc, compression, wanted, scan);
        }
    }
}

/// What was looked for and by which build, as one string: two scans with the same key find
/// the same things.
pub fn wanted_key(wanted: &Wanted) -> String {
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v.dedup();
        v.join(",")
    };
    let mut key = format!(
        "tool={}\ntargets={}\npackages={}\ncompanions={}",
        crate::VERSION,
        sorted(&wanted.targets),
        sorted(&wanted.packages),
        sorted(&wanted.companions)
    );
    // Exact paths are named only when there are some, so the keys of other scans stay as they were.
    if !wanted.paths.is_empty() {
        key.push_str(&format!("\npaths={}", sorted(&wanted.paths)));
    }
    if !wanted.resolved.is_empty() {
        key.push_str(&format!("\nresolved={}", sorted(&wanted.resolved)));
    }
    if wanted.dists {
        key.push_str("\ndists=1");
    }
    key
}

/// The most kept file contents a scan that is not for distributions (target, guard and
/// version files) may hold and be cached; real scans keep tens of KiB. A scan that kept more (crafted layers, bombs)
/// is not cached: reading it again is the safe path.
const MAX_CACHED_OTHER: u64 = 1024 * 1024;

/// The bound of a cache folder (`RUNNER_PATCH_SCAN_CACHE_MAX_MB`, else [`DEFAULT_MAX_BYTES`]).
fn max_bytes() -> u64 {
    std::env::var("RUNNER_PATCH_SCAN_CACHE_MAX_MB")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_MAX_BYTES, |mb| mb.saturating_mul(1024 * 1024))
}

/// The entry's file: one per layer and key, named by the sha256 of both.
fn entry_path(dir: &Path, desc: &Descriptor, compression: Compression, key: &str) -> PathBuf {
    let name = crate::digest::sha256(
        format!(
            "runner-patch scan cache {FORMAT}\n{}\n{}\n{}\n{key}",
            desc.digest,
            desc.size,
            compression_name(compression)
        )
        .as_bytes(),
    );
    let hex = name.trim_start_matches("sha256:");
    dir.join(format!("v{FORMAT}")).join(format!("{hex}.json"))
}

fn load(
    dir: &Path,
    desc: &Descriptor,
    compression: Compression,
    wanted: &Wanted,
) -> Option<LayerScan> {
    let key = wanted_key(wanted);
    let path = entry_path(dir, desc, compression, &key);
    let size = match std::fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::debug!("scan cache entry {} unreadable: {e}", path.display());
            return None;
        }
    };
    if size > MAX_ENTRY_BYTES {
        tracing::warn!(
            "scan cache entry for layer {} ignored ({size} bytes, more than an entry holds); reading the layer again",
            desc.digest
        );
        return None;
    }
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            tracing::debug!("scan cache entry {} unreadable: {e}", path.display());
            return None;
        }
    };
    match decode(&bytes, desc, compression, &key) {
        Ok(scan) => {
            touch(&path);
            tracing::debug!("layer {}: scan from the cache", desc.digest);
            Some(scan)
        }
        Err(why) => {
            tracing::warn!(
                "scan cache entry for layer {} ignored ({why}); reading the layer again",
                desc.digest
            );
            None
        }
    }
}

fn store(
    dir: &Path,
    desc: &Descriptor,
    compression: Compression,
    wanted: &Wanted,
    scan: &LayerScan,
) {
    // A scan for distributions (a `wheels` patch's: every `METADATA` and `RECORD`, and the
    // files that tell the platform, such as `libc.so.6`) is cached whatever it kept. Other
    // scans keep tens of KiB of target, guard and version files in real layers, and one that
    // kept more (crafted layers) is simply read again.
    let kept_files: u64 = scan
        .files
        .values()
        .map(|c| c.len() as u64)
        .chain(scan.targets.iter().map(|t| t.content.len() as u64))
        .sum();
    if !wanted.dists && kept_files > MAX_CACHED_OTHER {
        tracing::debug!("layer {}: scan keeps too much to cache", desc.digest);
        return;
    }
    let key = wanted_key(wanted);
    let path = entry_path(dir, desc, compression, &key);
    let written = std::fs::create_dir_all(path.parent().unwrap_or(dir)).and_then(|()| {
        crate::fsutil::write_atomic_with(&path, |w| encode_to(w, desc, compression, &key, scan))
    });
    if let Err(e) = written {
        tracing::debug!("scan cache entry {} not written: {e}", path.display());
        return;
    }
    evict(dir, &path, max_bytes());
}

/// Keeps the folder within `max` bytes: the entries least recently written or read go first
/// (down to nine tenths of `max`, so that not every store evicts), never `just_written`.
/// Folders of earlier formats are removed. Best effort: another run may be removing too.
fn evict(dir: &Path, just_written: &Path, max: u64) {
    for old in 1..FORMAT {
        let _ = std::fs::remove_dir_all(dir.join(format!("v{old}")));
    }
    let Ok(read) = std::fs::read_dir(dir.join(format!("v{FORMAT}"))) else {
        return;
    };
    let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = read
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let used = m.modified().ok()?;
            (m.is_file() && e.path().extension().is_some_and(|x| x == "json"))
                .then(|| (used, m.len(), e.path()))
        })
        .collect();
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    if total <= max {
        return;
    }
    entries.sort();
    let goal = max / 10 * 9;
    for (_, len, path) in entries {
        if total <= goal {
            break;
        }
        if path != just_written && std::fs::remove_file(&path).is_ok() {
            tracing::debug!("scan cache: removed {} ({len} bytes)", path.display());
            total -= len;
        }
    }
}

/// Marks an entry as just used, so eviction keeps it longest (best effort).
fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

mod entry;

#[cfg(test)]
use entry::encode;
use entry::{compression_name, decode, encode_to, FORMAT, MAX_ENTRY_BYTES};

#[cfg(test)]
mod tests;
