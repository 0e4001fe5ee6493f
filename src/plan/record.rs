//! The digest map's record of a plan (and of what its push moved): the planner fills the map's
//! schema, which knows nothing of plans.

use crate::digest_map::{
    AddedLayer, CompanionRecord, ImageRecord, PatchLayer, PatchRecord, PlatformRecord,
};
use crate::layer::NewLayer;
use crate::patch::Outcome;
use crate::plan::types::{Companion, ImagePlan, NewImage, PlatformPlan};

/// The record of a plan; `patched_digest` is what the tag serves when the image carries the
/// patch (after this run, or already before it), and null otherwise. `moved` names the
/// companion tags the push moved.
pub fn record(p: &ImagePlan, moved: &[String]) -> ImageRecord {
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
        outcome: p.outcome,
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
            .map(|c| companion_record(p, c, moved))
            .collect(),
        signatures: Vec::new(),
        platforms: p.platforms.iter().map(platform_record).collect(),
        in_progress: false,
    }
}

/// Only a companion on the original child (or already on the patched one) is this image's to
/// move; one pointing elsewhere is recorded as it is.
fn companion_record(p: &ImagePlan, c: &Companion, moved: &[String]) -> CompanionRecord {
    let ours = c.is_ours();
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
        moved: moved.contains(&c.target_tag) || patched.is_some_and(|d| d.digest == c.current),
    }
}

fn patch_layer(l: &NewLayer) -> PatchLayer {
    PatchLayer {
        digest: l.digest.clone(),
        diff_id: l.diff_id.clone(),
        size: l.size(),
        media_type: l.media_type.clone(),
    }
}

fn platform_record(pl: &PlatformPlan) -> PlatformRecord {
    PlatformRecord {
        platform: pl.platform.clone(),
        outcome: pl.outcome,
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
        warnings: pl.warnings.clone(),
        // The last layer appended (the only one when a single file patch runs).
        added_layer: pl.new.as_ref().and_then(|n| {
            n.layers.last().map(|l| AddedLayer {
                digest: l.digest.clone(),
                diff_id: l.diff_id.clone(),
                size: l.size(),
                media_type: l.media_type.clone(),
                config_digest: n.config_digest.clone(),
            })
        }),
        layers_scanned: pl.layers_scanned,
        bytes_scanned: pl.bytes_scanned,
        bytes_to_push: pl.new.as_ref().map_or(0, NewImage::bytes),
        provenance: None,
        patches: pl
            .patches
            .iter()
            .map(|s| PatchRecord {
                id: s.id.clone(),
                outcome: s.outcome,
                reason: s.reason.clone(),
                layer: s
                    .layer
                    .and_then(|i| pl.new.as_ref().and_then(|n| n.layers.get(i)))
                    .map(patch_layer),
                installed: s.installed.clone(),
            })
            .collect(),
    }
}
