//! The digest map's schema: what the release pipeline keeps of what each tag pointed to before
//! and after. Its field names are a contract; outcomes are typed and written as today's strings,
//! so maps written by earlier versions still read. The records are filled by the planner and
//! the pusher; nothing here depends on them.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::digest_map::error::Error;
use crate::patch::outcome::Outcome;
use crate::registry::Repo;

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
    pub outcome: Outcome,
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
    pub signatures: Vec<SignatureRecord>,
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
    pub outcome: Outcome,
    pub original_digest: String,
    pub patched_digest: Option<String>,
    pub file: Option<String>,
    pub vllm_version: Option<String>,
    pub reason: String,
    /// What its patches may break without being refused (installed distributions whose
    /// requirements a downgrade no longer meets, worded as `pip check` does); left out when
    /// there are none, so maps without any stay as they were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_layer: Option<AddedLayer>,
    pub layers_scanned: usize,
    pub bytes_scanned: u64,
    #[serde(default)]
    pub bytes_to_push: u64,
    /// The provenance artifact attached to the patched manifest (or that would be, in a plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<ProvenanceRecord>,
    /// Each patch of the run, in the order applied, with its outcome and the layer it added.
    #[serde(default)]
    pub patches: Vec<PatchRecord>,
}

/// What one patch did to one platform.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PatchRecord {
    pub id: String,
    pub outcome: Outcome,
    pub reason: String,
    /// The layer it appended (none for `env` patches, which edit the config only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<PatchLayer>,
    /// The wheels it installed (a `wheels` patch): name, version, wheel file, sha256, URL
    /// without credentials; left out when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installed: Vec<crate::patch::InstalledWheel>,
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

/// What the map records of a platform's provenance artifact.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProvenanceRecord {
    /// The artifact manifest's digest.
    pub digest: String,
    pub media_type: String,
    pub artifact_type: String,
    /// The statement blob (its one layer).
    pub statement_digest: String,
    /// `referrers-api` when the registry keeps the referrers list, `referrers-tag` when this
    /// tool keeps the `sha256-<hex>` index; null when not pushed (a dry run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached_via: Option<String>,
    /// False when the artifact was already there (a re-run).
    #[serde(default)]
    pub attached: bool,
}

/// A signature or attestation of the source image: it covers the original digest, not the
/// patched one, and is never moved or copied.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SignatureRecord {
    /// `cosign-signature` (`.sig` tag), `cosign-attestation` (`.att` tag) or `referrer`.
    pub kind: String,
    /// Where it is: a tag (`REPO:sha256-<hex>.sig`) or a digest (`REPO@sha256:...`).
    pub reference: String,
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The digest it signs: an original, which stays in the registry.
    pub covers: String,
    /// The patched digest that replaced it, which it does not cover.
    pub not_covering: Option<String>,
}

impl ImageRecord {
    /// Whether `rollback` has something to put back: a tag moved off a known original.
    pub fn restorable(&self) -> bool {
        self.patched_digest
            .as_ref()
            .is_some_and(|p| *p != self.original_digest)
    }
}

/// Splits a map entry's `REPO:TAG` (as `source`/`target` hold them) into repository and tag.
pub fn split_tagged(s: &str) -> Result<(Repo, String), Error> {
    let (repo, r) =
        Repo::parse_reference(s).map_err(|e| Error::Invalid(format!("digest map: {e}")))?;
    let tag = r
        .tag()
        .ok_or_else(|| Error::Invalid(format!("digest map: {s:?} has no tag")))?
        .to_owned();
    Ok((repo, tag))
}

impl DigestMap {
    /// Every repository the map names, for a client that must reach them all.
    pub fn repos(&self) -> Result<Vec<Repo>, Error> {
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
    /// old file or the whole new one, never a part; a failed write leaves the old file. The
    /// rename itself reaches the disk before a tag moves on its strength.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut body = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        body.push(b'\n');
        crate::fsutil::write_atomic(path, &body)
    }

    pub fn read(path: &Path) -> Result<Self, Error> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::Io(format!("cannot read digest map {}: {e}", path.display())))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Invalid(format!("digest map {} is not valid: {e}", path.display())))
    }
}
