//! The digest map: the record the release pipeline keeps of what each tag pointed to before and
//! after. Its field names are a contract. While `apply` runs, a [`Recorder`] keeps the map on
//! disk current: each original is written (atomically, fsynced) before the tag it belongs to
//! moves, and merged with what earlier runs recorded, so no failure, kill or re-run loses one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::patch::Outcome;
use crate::plan::ImagePlan;

/// The whole map.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DigestMap {
    pub patch: String,
    pub tool: String,
    pub created: String,
    pub images: Vec<ImageRecord>,
}

/// One source tag.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageRecord {
    pub source: String,
    pub target: String,
    pub outcome: String,
    pub original_digest: String,
    pub patched_digest: Option<String>,
    pub media_type: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_attestations: Vec<String>,
    /// Bytes of new blobs and manifests this image needs in the target (before skipping what
    /// the target already has).
    #[serde(default)]
    pub bytes_to_push: u64,
    pub platforms: Vec<PlatformRecord>,
    /// Per-platform companion tags (`<tag>-linux-amd64`) and whether they were moved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub companions: Vec<CompanionRecord>,
    /// The run that wrote this record was about to move (or moving) its tags and has not
    /// finished: each tag may point at the original or at the patched digest. A re-run
    /// completes it; `rollback` restores whatever moved.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_progress: bool,
    /// The source's own signatures and attestations: they cover the original digests only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<crate::provenance::SignatureRecord>,
}

/// A per-platform companion tag.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompanionRecord {
    pub platform: String,
    pub source: String,
    pub target: String,
    /// What the companion pointed at before.
    pub original_digest: String,
    /// The patched child it points at now (null when its platform was not patched).
    pub patched_digest: Option<String>,
    pub moved: bool,
}

/// One platform of a tag.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlatformRecord {
    pub platform: String,
    pub outcome: String,
    pub original_digest: String,
    pub patched_digest: Option<String>,
    pub file: Option<String>,
    pub vllm_version: Option<String>,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_layer: Option<AddedLayer>,
    pub layers_scanned: usize,
    pub bytes_scanned: u64,
    #[serde(default)]
    pub bytes_to_push: u64,
    /// The provenance artifact attached to the patched manifest (or that would be, in a plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<crate::provenance::ProvenanceRecord>,
    /// Each patch of the run, in the order applied, with its outcome and the layer it added.
    #[serde(default)]
    pub patches: Vec<PatchRecord>,
}

/// What one patch did to one platform.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PatchRecord {
    pub id: String,
    pub outcome: String,
    pub reason: String,
    /// The layer it appended (none for `env` patches, which edit the config only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<PatchLayer>,
}

/// A layer one patch appended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PatchLayer {
    pub digest: String,
    pub diff_id: String,
    pub size: u64,
    pub media_type: String,
}

/// The appended layer and config of a patched platform.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddedLayer {
    pub digest: String,
    pub diff_id: String,
    pub size: u64,
    pub media_type: String,
    pub config_digest: String,
}

impl ImageRecord {
    /// The record of a plan; `patched_digest` is what the tag serves when the image carries the
    /// patch (after this run, or already before it), and null otherwise.
    pub fn from_plan(p: &ImagePlan, pushed: Option<&crate::push::PushReport>) -> Self {
        let patched_digest = match p.outcome {
            Outcome::Patched => p.new_top.as_ref().map(|d| d.digest.clone()),
            Outcome::AlreadyPatched => Some(p.original.digest.clone()),
            _ => None,
        };
        // An already patched image names its original itself (label or annotation); without
        // that, the best the registry can tell is what the tag serves now.
        let original_digest = p
            .recorded_original
            .clone()
            .unwrap_or_else(|| p.original.digest.clone());
        ImageRecord {
            source: format!("{}:{}", p.source, p.tag),
            target: format!("{}:{}", p.target, p.target_tag),
            outcome: p.outcome.as_str().to_owned(),
            original_digest,
            patched_digest,
            media_type: p.original.media_type.clone(),
            reason: p.reason.clone(),
            dropped_attestations: if p.outcome == Outcome::Patched {
                p.dropped.clone()
            } else {
                Vec::new()
            },
            bytes_to_push: p.bytes_to_push(),
            companions: p
                .companions
                .iter()
                .map(|c| {
                    // Only a companion on the original child (or already on the patched one)
                    // is this image's to move; one pointing elsewhere is recorded as it is.
                    let ours = crate::push::companion_is_ours(c);
                    let patched = c.patched.as_ref().filter(|_| ours);
                    CompanionRecord {
                        platform: c.platform.clone(),
                        source: format!("{}:{}", p.source, c.source_tag),
                        target: format!("{}:{}", p.target, c.target_tag),
                        original_digest: if ours {
                            c.original_digest.clone()
                        } else {
                            c.current.clone()
                        },
                        patched_digest: patched.map(|d| d.digest.clone()),
                        moved: pushed.is_some_and(|r| r.companions_moved.contains(&c.target_tag))
                            || patched.is_some_and(|d| d.digest == c.current),
                    }
                })
                .collect(),
            signatures: Vec::new(),
            platforms: p
                .platforms
                .iter()
                .map(|pl| PlatformRecord {
                    platform: pl.platform.clone(),
                    outcome: pl.outcome.as_str().to_owned(),
                    original_digest: pl
                        .recorded_original
                        .clone()
                        .unwrap_or_else(|| pl.original.digest.clone()),
                    patched_digest: match pl.outcome {
                        Outcome::Patched => pl.new.as_ref().map(|n| n.manifest.digest.clone()),
                        Outcome::AlreadyPatched => Some(pl.original.digest.clone()),
                        _ => None,
                    },
                    file: pl.file.clone(),
                    vllm_version: pl.version.clone(),
                    reason: pl.reason.clone(),
                    // The last layer appended (the only one when a single file patch runs).
                    added_layer: pl.new.as_ref().and_then(|n| {
                        n.layers.last().map(|l| AddedLayer {
                            digest: l.digest.clone(),
                            diff_id: l.diff_id.clone(),
                            size: l.bytes.len() as u64,
                            media_type: l.media_type.clone(),
                            config_digest: n.config_digest.clone(),
                        })
                    }),
                    layers_scanned: pl.layers_scanned,
                    bytes_scanned: pl.bytes_scanned,
                    bytes_to_push: pl.new.as_ref().map_or(0, crate::plan::NewImage::bytes),
                    provenance: None,
                    patches: pl
                        .patches
                        .iter()
                        .map(|s| PatchRecord {
                            id: s.id.clone(),
                            outcome: s.outcome.as_str().to_owned(),
                            reason: s.reason.clone(),
                            layer: s
                                .layer
                                .and_then(|i| pl.new.as_ref().and_then(|n| n.layers.get(i)))
                                .map(|l| PatchLayer {
                                    digest: l.digest.clone(),
                                    diff_id: l.diff_id.clone(),
                                    size: l.bytes.len() as u64,
                                    media_type: l.media_type.clone(),
                                }),
                        })
                        .collect(),
                })
                .collect(),
            in_progress: false,
        }
    }

    /// Whether `rollback` has something to put back: a tag moved off a known original.
    pub fn restorable(&self) -> bool {
        self.patched_digest
            .as_ref()
            .is_some_and(|p| *p != self.original_digest)
    }
}

/// Merges a new record into the list, never replacing an original an earlier record holds.
///
/// The last record for the same target decides: when the new record starts from the same
/// original, it replaces it (the same work, further along); when it starts from the digest the
/// earlier record patched to (a re-run after a failure or a kill, or a re-run that finds the
/// image already patched), the earlier originals stay and only the progress is taken over; when
/// it starts from anything else (someone moved the tag in between), both are kept.
pub fn merge(images: &mut Vec<ImageRecord>, new: ImageRecord) {
    let Some(i) = images.iter().rposition(|r| r.target == new.target) else {
        images.push(new);
        return;
    };
    let old = &mut images[i];
    let continues = old.patched_digest.is_some()
        && (old.patched_digest.as_deref() == Some(new.original_digest.as_str())
            || (new.outcome == Outcome::AlreadyPatched.as_str()
                && new.patched_digest == old.patched_digest));
    if continues {
        // Progress on the same lineage: every original already recorded stays.
        old.in_progress = new.in_progress;
        for c in new.companions {
            match old.companions.iter_mut().find(|o| o.target == c.target) {
                Some(o) if c.patched_digest == o.patched_digest => o.moved |= c.moved,
                Some(o) if o.patched_digest.is_none() && c.patched_digest.is_some() => {
                    o.patched_digest = c.patched_digest;
                    o.moved = c.moved;
                }
                Some(_) => {}
                None => old.companions.push(c),
            }
        }
    } else if new.original_digest == old.original_digest {
        *old = new;
    } else {
        images.push(new);
    }
}

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
    pub fn open(path: &Path, patch: &str) -> Result<Self, String> {
        let shown = path.display();
        if path.is_dir() {
            return Err(format!("digest map path {shown} is a directory"));
        }
        let dir = parent_dir(path);
        if !dir.is_dir() {
            return Err(format!(
                "cannot write digest map {shown}: folder {} does not exist",
                dir.display()
            ));
        }
        let lock_path = beside(path, ".lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("cannot write digest map {shown}: {e}"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(format!(
                    "digest map {shown} is being written by another runner-patch run; wait for it or use another --manifest"
                ))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(format!("cannot lock digest map {shown}: {e}"))
            }
        }
        let map = if path.exists() {
            let m = DigestMap::read(path)?;
            if m.patch != patch {
                return Err(format!(
                    "digest map {shown} records patch {:?}, not {patch:?}; choose another --manifest",
                    m.patch
                ));
            }
            m
        } else {
            DigestMap::new(patch, Vec::new())
        };
        // Probe: the same kind of write the map itself will need.
        let probe = tmp_path(path);
        std::fs::write(&probe, b"{}")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| format!("cannot write digest map {shown}: {e}"))?;
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
    pub fn record(&self, rec: ImageRecord) -> Result<(), String> {
        let mut map = self.map.lock().map_err(|_| "digest map lock poisoned")?;
        merge(&mut map.images, rec);
        map.tool = format!("runner-patch {}", env!("CARGO_PKG_VERSION"));
        map.write(&self.path)
            .map_err(|e| format!("cannot write digest map {}: {e}", self.path.display()))?;
        self.dirty.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Puts this run's new records in the order of `targets` (records arrive as images
    /// finish, which varies from run to run) and writes the map once more.
    pub fn finish(&self, targets: &[String]) -> Result<(), String> {
        if !self.wrote() {
            return Ok(());
        }
        let mut map = self.map.lock().map_err(|_| "digest map lock poisoned")?;
        let at = self.earlier.min(map.images.len());
        map.images[at..].sort_by_key(|r| {
            targets
                .iter()
                .position(|t| *t == r.target)
                .unwrap_or(usize::MAX)
        });
        map.write(&self.path)
            .map_err(|e| format!("cannot write digest map {}: {e}", self.path.display()))
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

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// `.<map name><suffix>` in the map's folder: its temporary file and its lock.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "runner-patch-manifest.json".into());
    parent_dir(path).join(format!(".{name}{suffix}"))
}

fn tmp_path(path: &Path) -> PathBuf {
    beside(path, &format!(".{}.tmp", std::process::id()))
}

/// Splits a map entry's `REPO:TAG` (as `source`/`target` hold them) into repository and tag.
pub fn split_tagged(s: &str) -> Result<(crate::registry::Repo, String), String> {
    let (repo, r) =
        crate::registry::Repo::parse_reference(s).map_err(|e| format!("digest map: {e}"))?;
    let tag = r
        .tag()
        .ok_or_else(|| format!("digest map: {s:?} has no tag"))?
        .to_owned();
    Ok((repo, tag))
}

impl DigestMap {
    /// Every repository the map names, for a client that must reach them all.
    pub fn repos(&self) -> Result<Vec<crate::registry::Repo>, String> {
        let mut out = Vec::new();
        for i in &self.images {
            out.push(split_tagged(&i.source)?.0);
            out.push(split_tagged(&i.target)?.0);
        }
        Ok(out)
    }

    pub fn new(patch: &str, images: Vec<ImageRecord>) -> Self {
        let created = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        DigestMap {
            patch: patch.to_owned(),
            tool: format!("runner-patch {}", env!("CARGO_PKG_VERSION")),
            created,
            images,
        }
    }

    /// Writes the map atomically and durably: a reader (or a machine that lost power) sees the
    /// old file or the whole new one, never a part; a failed write leaves the old file.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let tmp = tmp_path(path);
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            let mut body = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
            body.push(b'\n');
            f.write_all(&body)?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, path)?;
            // The rename itself must reach the disk before a tag moves on its strength.
            std::fs::File::open(parent_dir(path))?.sync_all()
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    pub fn read(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read digest map {}: {e}", path.display()))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| format!("digest map {} is not valid: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests;
