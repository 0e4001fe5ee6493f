//! The digest map: the record the release pipeline keeps of what each tag pointed to before and
//! after. Its field names are a contract; it is written atomically (temporary file, then rename).

use std::io::Write;
use std::path::Path;

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
        ImageRecord {
            source: format!("{}:{}", p.source, p.tag),
            target: format!("{}:{}", p.target, p.target_tag),
            outcome: p.outcome.as_str().to_owned(),
            original_digest: p.original.digest.clone(),
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
                .map(|c| CompanionRecord {
                    platform: c.platform.clone(),
                    source: format!("{}:{}", p.source, c.source_tag),
                    target: format!("{}:{}", p.target, c.target_tag),
                    original_digest: c.current.clone(),
                    patched_digest: c.patched.as_ref().map(|d| d.digest.clone()),
                    moved: pushed.is_some_and(|r| r.companions_moved.contains(&c.target_tag)),
                })
                .collect(),
            platforms: p
                .platforms
                .iter()
                .map(|pl| PlatformRecord {
                    platform: pl.platform.clone(),
                    outcome: pl.outcome.as_str().to_owned(),
                    original_digest: pl.original.digest.clone(),
                    patched_digest: match pl.outcome {
                        Outcome::Patched => pl.new.as_ref().map(|n| n.manifest.digest.clone()),
                        Outcome::AlreadyPatched => Some(pl.original.digest.clone()),
                        _ => None,
                    },
                    file: pl.file.clone(),
                    vllm_version: pl.version.clone(),
                    reason: pl.reason.clone(),
                    added_layer: pl.new.as_ref().map(|n| AddedLayer {
                        digest: n.layer.digest.clone(),
                        diff_id: n.layer.diff_id.clone(),
                        size: n.layer.bytes.len() as u64,
                        media_type: n.layer.media_type.clone(),
                        config_digest: n.config_digest.clone(),
                    }),
                    layers_scanned: pl.layers_scanned,
                    bytes_scanned: pl.bytes_scanned,
                    bytes_to_push: pl.new.as_ref().map_or(0, |n| {
                        (n.layer.bytes.len() + n.config.len() + n.manifest.bytes.len()) as u64
                    }),
                })
                .collect(),
        }
    }
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

    /// Writes the map atomically: a reader sees the old file or the whole new one.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => std::path::PathBuf::from("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "runner-patch-manifest.json".into());
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let mut f = std::fs::File::create(&tmp)?;
        let mut body = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        body.push(b'\n');
        f.write_all(&body)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    }

    pub fn read(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read digest map {}: {e}", path.display()))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| format!("digest map {} is not valid: {e}", path.display()))
    }
}
