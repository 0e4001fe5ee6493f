//! The plan of one image: for every platform, what the container sees, what the patch decided,
//! and the new layer, config and manifest it needs; then the new index. Computed without writing
//! anything, so `--dry-run` shows exactly what `apply` pushes.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use tokio::sync::Semaphore;

use crate::image;
use crate::layer::NewLayer;
use crate::media::{Document, Kind};
use crate::patch::{Outcome, Patch};
use crate::registry::{Registry, Repo};
use crate::rewrite;
use crate::view::Layers;
mod platform;

use platform::plan_platform;

/// What every image of a run is planned with: the registry, the patches in the order given,
/// the permits bounding concurrent platform scans, and the run's layer reader.
pub struct Run {
    pub reg: Arc<Registry>,
    pub patches: Vec<Patch>,
    pub scans: Arc<Semaphore>,
    pub layers: Layers,
}

/// The new objects of one patched platform, ready to push.
#[derive(Debug, Clone)]
pub struct NewImage {
    /// One layer per file patch applied, in order (none for a run of `env` patches only).
    pub layers: Vec<NewLayer>,
    pub config: Vec<u8>,
    pub config_digest: String,
    pub manifest: Document,
}

impl NewImage {
    /// Bytes of the new layers, config and manifest.
    pub fn bytes(&self) -> u64 {
        (self.layers.iter().map(|l| l.bytes.len()).sum::<usize>()
            + self.config.len()
            + self.manifest.bytes.len()) as u64
    }
}

/// One file a patch wrote or hid, with its sha256 before and after (for provenance).
#[derive(Debug, Clone)]
pub struct FileChange {
    pub path: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// What one patch decided for one platform.
#[derive(Debug, Clone)]
pub struct PatchStep {
    pub id: String,
    pub title: String,
    /// sha256 of the patch's definition.
    pub definition_digest: String,
    pub outcome: Outcome,
    pub reason: String,
    /// Index into [`NewImage::layers`] of the layer it added.
    pub layer: Option<usize>,
    pub files: Vec<FileChange>,
}

/// One platform of an image.
#[derive(Debug, Clone)]
pub struct PlatformPlan {
    pub platform: String,
    pub original: Document,
    pub outcome: Outcome,
    pub reason: String,
    pub file: Option<String>,
    pub version: Option<String>,
    pub shape: Option<String>,
    pub layers_scanned: usize,
    pub bytes_scanned: u64,
    pub new: Option<NewImage>,
    /// Each patch's decision, in the order applied.
    pub patches: Vec<PatchStep>,
    /// For a platform that already carries a patch: the original manifest digest its config
    /// label names, so a re-run knows the original even without the digest map.
    pub recorded_original: Option<String>,
}

/// One tag of the source and where its patched image goes.
#[derive(Debug, Clone)]
pub struct ImagePlan {
    pub source: Repo,
    pub tag: String,
    pub target: Repo,
    pub target_tag: String,
    pub original: Document,
    pub platforms: Vec<PlatformPlan>,
    /// The new index (or the new manifest for a single-manifest tag) when anything is patched.
    pub new_top: Option<Document>,
    /// Attestation children left out of the new index.
    pub dropped: Vec<String>,
    /// Per-platform companion tags (`<tag>-linux-amd64`) that point at a child of this image.
    pub companions: Vec<Companion>,
    pub outcome: Outcome,
    pub reason: String,
    /// For an image that already carries a patch: the original digest it names itself (the
    /// OCI index annotation, or a single manifest's config label); `None` when it cannot tell.
    pub recorded_original: Option<String>,
}

impl ImagePlan {
    /// Bytes of everything new: layers, configs, manifests and the new index.
    pub fn bytes_to_push(&self) -> u64 {
        let platforms: u64 = self
            .platforms
            .iter()
            .filter_map(|p| p.new.as_ref())
            .map(NewImage::bytes)
            .sum();
        let index = match (&self.new_top, self.original.kind()) {
            (Some(top), Some(Kind::Index(_))) => top.bytes.len() as u64,
            _ => 0,
        };
        platforms + index
    }
}

/// A per-platform companion tag of a multi-arch tag; it follows its child when that is patched.
#[derive(Debug, Clone)]
pub struct Companion {
    pub platform: String,
    pub source_tag: String,
    pub target_tag: String,
    /// What the companion tag pointed at when read (the original child, or something else).
    pub current: String,
    pub original_digest: String,
    /// The patched child it should point at, when this platform was patched.
    pub patched: Option<Document>,
}

/// `linux/arm64/v8` -> `linux-arm64`, the suffix the runner project's per-platform tags use.
pub fn companion_suffix(platform: &str) -> String {
    crate::tags::companion_suffix(platform)
}

/// Plans one tag: resolves it, scans each platform (concurrently, each holding one of the run's
/// `scans` permits, so an index with thousands of children opens at most that many scans) and
/// builds what is new.
pub async fn plan_image(
    run: Arc<Run>,
    source: &Repo,
    tag: &str,
    target: &Repo,
    target_tag: &str,
) -> Result<ImagePlan> {
    let reg = &run.reg;
    let top = reg.manifest_get(&source.at_tag(tag)).await?;
    let src = format!("{source}:{tag}");
    let view = image::View::parse(&top, &src).map_err(|e| anyhow!(e))?;
    let kind = top
        .kind()
        .ok_or_else(|| anyhow!("{src} is neither a manifest nor an index"))?;
    let mut platforms = Vec::new();
    let mut dropped = Vec::new();
    match &view {
        image::View::Index(index) => {
            if index.children.is_empty() {
                bail!("index {src} lists no manifests");
            }
            let mut jobs = Vec::new();
            for child in &index.children {
                let desc = child.descriptor.clone();
                if child.attestation {
                    dropped.push(desc.digest);
                    continue;
                }
                let platform = child.platform.clone();
                let (run, source, tag) = (run.clone(), source.clone(), tag.to_owned());
                jobs.push(tokio::spawn(async move {
                    let _permit = run.scans.clone().acquire_owned().await?;
                    let child = run
                        .reg
                        .manifest_get(&source.at_digest(&desc.digest))
                        .await?;
                    if !matches!(child.kind(), Some(Kind::Manifest(_))) {
                        bail!(
                            "{platform} child {} of {source} is {:?}, not an image manifest",
                            desc.digest,
                            child.media_type
                        );
                    }
                    plan_platform(&run, &source, &tag, platform, child).await
                }));
            }
            for job in jobs {
                platforms.push(job.await.context("platform task failed")??);
            }
        }
        image::View::Manifest(_) => {
            let _permit = run.scans.clone().acquire_owned().await?;
            platforms.push(plan_platform(&run, source, tag, String::new(), top.clone()).await?);
        }
    }

    let refused: Vec<&PlatformPlan> = platforms
        .iter()
        .filter(|p| p.outcome == Outcome::Refused)
        .collect();
    let (outcome, reason) = if let Some(first) = refused.first() {
        (
            Outcome::Refused,
            format!("{}: {}", first.platform, first.reason),
        )
    } else {
        let best = platforms
            .iter()
            .map(|p| p.outcome)
            .max()
            .unwrap_or(Outcome::NotAffected);
        let reason = match best {
            Outcome::Patched => "patched".to_owned(),
            _ => platforms
                .first()
                .map(|p| p.reason.clone())
                .unwrap_or_default(),
        };
        (best, reason)
    };

    let new_top = if outcome == Outcome::Patched {
        match kind {
            Kind::Index(_) => {
                let replaced: HashMap<String, (String, u64)> = platforms
                    .iter()
                    .filter_map(|p| {
                        p.new.as_ref().map(|n| {
                            (
                                p.original.digest.clone(),
                                (n.manifest.digest.clone(), n.manifest.bytes.len() as u64),
                            )
                        })
                    })
                    .collect();
                let (doc, _) = rewrite::index_replace(&top, &replaced).map_err(|e| anyhow!(e))?;
                let doc =
                    rewrite::index_record_original(&doc, &top.digest).map_err(|e| anyhow!(e))?;
                Some(doc)
            }
            Kind::Manifest(_) => platforms
                .first()
                .and_then(|p| p.new.as_ref())
                .map(|n| n.manifest.clone()),
        }
    } else {
        None
    };

    let mut companions = Vec::new();
    if matches!(kind, Kind::Index(_)) {
        for p in &platforms {
            let suffix = companion_suffix(&p.platform);
            let source_tag = format!("{tag}-{suffix}");
            let target_companion = format!("{target_tag}-{suffix}");
            if let Some(current) = reg.manifest_digest(&source.at_tag(&source_tag)).await? {
                // A patched platform moves its companion from the original child to the new
                // one; an already patched one completes a companion a failed or killed run
                // left on the original child (known from the child's own label).
                let (original_digest, patched) = match (&p.new, p.outcome) {
                    (Some(n), _) => (p.original.digest.clone(), Some(n.manifest.clone())),
                    (None, Outcome::AlreadyPatched) => (
                        p.recorded_original
                            .clone()
                            .unwrap_or_else(|| p.original.digest.clone()),
                        Some(p.original.clone()),
                    ),
                    _ => (p.original.digest.clone(), None),
                };
                if patched.is_some() {
                    crate::tags::check(&target_companion)
                        .map_err(|e| anyhow!("companion of {src}: {e}"))?;
                }
                companions.push(Companion {
                    platform: p.platform.clone(),
                    source_tag,
                    target_tag: target_companion,
                    current,
                    original_digest,
                    patched,
                });
            }
        }
    }
    let recorded_original = if outcome == Outcome::AlreadyPatched {
        match kind {
            Kind::Index(_) => rewrite::index_recorded_original(&top),
            Kind::Manifest(_) => platforms.first().and_then(|p| p.recorded_original.clone()),
        }
    } else {
        None
    };

    Ok(ImagePlan {
        source: source.clone(),
        tag: tag.to_owned(),
        target: target.clone(),
        target_tag: target_tag.to_owned(),
        original: top,
        platforms,
        new_top,
        dropped,
        companions,
        outcome,
        reason,
        recorded_original,
    })
}
