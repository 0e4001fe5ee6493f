//! Layers built once per run for identical changes: platforms of one architecture (or tags
//! of one release, or a Docker and an OCI child of one index) given the same changes get the
//! same bytes, so the second asks for the
//! layer the first built instead of reading a wheel and compressing it again. Entries hold
//! their blob weakly: a layer lives as long as a plan holds it, and its temporary file goes
//! with the last plan, whatever the cache remembers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Value};

use super::blob::WeakBlob;
use super::build::{build_changes, LayerError, NewLayer};
use crate::patch::verdict::Change;

/// A built layer without its bytes, and its bytes held weakly.
struct Kept {
    digest: String,
    diff_id: String,
    mtime: u64,
    blob: WeakBlob,
}

impl Kept {
    fn of(l: &NewLayer) -> Self {
        Kept {
            digest: l.digest.clone(),
            diff_id: l.diff_id.clone(),
            mtime: l.mtime,
            blob: l.blob.downgrade(),
        }
    }

    /// The layer, under `media_type` (a Docker and an OCI manifest share the same bytes).
    fn layer(&self, media_type: &str) -> Option<NewLayer> {
        Some(NewLayer {
            blob: self.blob.upgrade()?,
            digest: self.digest.clone(),
            diff_id: self.diff_id.clone(),
            media_type: media_type.to_owned(),
            mtime: self.mtime,
        })
    }
}

/// The layers a run has built, by what they were built from.
#[derive(Default)]
pub struct Shared {
    /// One slot per key; a slot is locked while its layer is built, so a second platform
    /// waits for the first's layer rather than building it too.
    slots: Mutex<HashMap<String, Arc<Mutex<Option<Kept>>>>>,
    built: Mutex<u64>,
}

impl Shared {
    /// The layer of `changes` ([`build_changes`]), built once while any plan holds it.
    pub fn layer(
        &self,
        changes: &[Change],
        whiteout_mtime: u64,
        media_type: &str,
    ) -> Result<NewLayer, LayerError> {
        let key = key(changes, whiteout_mtime);
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            slots.entry(key).or_default().clone()
        };
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(layer) = slot.as_ref().and_then(|k| k.layer(media_type)) {
            return Ok(layer);
        }
        let layer = build_changes(changes, whiteout_mtime, media_type)?;
        *slot = Some(Kept::of(&layer));
        *self.built.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Ok(layer)
    }

    /// How many layers were built (not taken from an earlier build).
    pub fn builds(&self) -> u64 {
        *self.built.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What decides a layer's bytes: every entry's header fields and content digest, in order,
/// and the whiteouts' mtime (the builder is reproducible from these alone; the media type
/// names the same gzip bytes in either manifest family).
fn key(changes: &[Change], whiteout_mtime: u64) -> String {
    let entry = |e: &crate::scan::FileEntry, size: u64, sha256: String| -> Value {
        json!([e.path, e.mode, e.uid, e.gid, e.uname, e.gname, e.mtime, size, sha256])
    };
    let items: Vec<Value> = changes
        .iter()
        .map(|c| match c {
            Change::Write(e) => entry(e, e.content.len() as u64, crate::digest::sha256(&e.content)),
            Change::Stream(s) => entry(&s.entry, s.size, format!("sha256:{}", s.sha256)),
            Change::Whiteout(p) => json!(p),
        })
        .collect();
    let all = json!([whiteout_mtime, items]);
    crate::digest::sha256(all.to_string().as_bytes())
}
