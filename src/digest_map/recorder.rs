//! Keeping the digest map on disk current while `apply` runs: each original is written
//! (atomically, fsynced) before the tag it belongs to moves, and merged with what earlier runs
//! recorded, so no failure, kill or re-run loses one.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::digest_map::error::Error;
use crate::digest_map::merge::merge;
use crate::digest_map::schema::{DigestMap, ImageRecord};
use crate::fsutil::{beside, parent_dir, tmp_path};

/// Keeps the digest map on disk current while a run moves tags (see the module doc).
pub struct Recorder {
    path: PathBuf,
    map: Mutex<DigestMap>,
    /// How many records the map held before this run (they keep their place).
    earlier: usize,
    /// Held for the whole run: two runs writing one map would each drop the other's records.
    _lock: std::fs::File,
    /// Whether anything this run did must be on disk (set by the first record).
    dirty: std::sync::atomic::AtomicBool,
}

impl Recorder {
    /// Checks, before any registry is touched, that the map can be written where asked: the
    /// path is not a directory, its folder exists and takes a file, and a map already there
    /// is one this tool can read (it is merged, never replaced).
    pub fn open(path: &Path, patch: &str) -> Result<Self, Error> {
        let shown = path.display();
        if path.is_dir() {
            return Err(Error::Unwritable(format!(
                "digest map path {shown} is a directory"
            )));
        }
        let dir = parent_dir(path);
        if !dir.is_dir() {
            return Err(Error::Unwritable(format!(
                "cannot write digest map {shown}: folder {} does not exist",
                dir.display()
            )));
        }
        let lock_path = beside(path, ".lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::Unwritable(format!("cannot write digest map {shown}: {e}")))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Locked(format!(
                    "digest map {shown} is being written by another runner-patch run; wait for it or use another --digest-map"
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::Unwritable(format!(
                    "cannot lock digest map {shown}: {e}"
                )))
            }
        }
        let map = if path.exists() {
            let m = DigestMap::read(path)?;
            if m.patch != patch {
                return Err(Error::OtherPatch(format!(
                    "digest map {shown} records patch {:?}, not {patch:?}; choose another --digest-map",
                    m.patch
                )));
            }
            m
        } else {
            DigestMap::new(patch, Vec::new())
        };
        // Probe: the same kind of write the map itself will need.
        let probe = tmp_path(path);
        std::fs::write(&probe, b"{}")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| Error::Unwritable(format!("cannot write digest map {shown}: {e}")))?;
        Ok(Recorder {
            path: path.to_owned(),
            earlier: map.images.len(),
            _lock: lock,
            map: Mutex::new(map),
            dirty: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Merges one record and writes the whole map before returning: a caller about to move a
    /// tag calls this first, and does not move it if this fails.
    pub fn record(&self, rec: ImageRecord) -> Result<(), Error> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        merge(&mut map.images, rec);
        map.tool = format!("runner-patch {}", env!("CARGO_PKG_VERSION"));
        map.write(&self.path).map_err(|e| {
            Error::Io(format!(
                "cannot write digest map {}: {e}",
                self.path.display()
            ))
        })?;
        self.dirty.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Merges many records and writes the map once: a join, which moves no tag.
    pub fn record_all(&self, recs: Vec<ImageRecord>) -> Result<(), Error> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        for rec in recs {
            merge(&mut map.images, rec);
        }
        map.tool = format!("runner-patch {}", env!("CARGO_PKG_VERSION"));
        map.write(&self.path).map_err(|e| {
            Error::Io(format!(
                "cannot write digest map {}: {e}",
                self.path.display()
            ))
        })?;
        self.dirty.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Puts this run's new records in the order of `targets` (records arrive as images
    /// finish, which varies from run to run) and writes the map once more.
    pub fn finish(&self, targets: &[String]) -> Result<(), Error> {
        if !self.wrote() {
            return Ok(());
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let at = self.earlier.min(map.images.len());
        map.images[at..].sort_by_key(|r| {
            targets
                .iter()
                .position(|t| *t == r.target)
                .unwrap_or(usize::MAX)
        });
        map.write(&self.path).map_err(|e| {
            Error::Io(format!(
                "cannot write digest map {}: {e}",
                self.path.display()
            ))
        })
    }

    /// [`Recorder::finish`], then says where the map is, or that no image completed (and the
    /// file, if any, is left as it was).
    pub fn conclude(&self, targets: &[String]) -> Result<(), Error> {
        self.finish(targets)?;
        let path = self.path.display();
        if self.wrote() {
            tracing::info!("digest map written to {path}");
        } else if self.path.exists() {
            tracing::warn!("no image completed; {path} left as it was");
        } else {
            tracing::warn!("no image completed; no digest map written");
        }
        Ok(())
    }

    /// The records as they stand (earlier runs' and this run's), for lookups of originals.
    pub fn images(&self) -> Vec<ImageRecord> {
        self.map
            .lock()
            .map(|m| m.images.clone())
            .unwrap_or_default()
    }

    /// The merged map, as the summary shows it.
    pub fn snapshot(&self) -> Option<DigestMap> {
        self.map.lock().ok().map(|m| m.clone())
    }

    /// Whether anything was recorded (so the file on disk is this run's).
    pub fn wrote(&self) -> bool {
        self.dirty.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
