//! Pushing a plan in the order that never leaves a dangling reference: blobs, then patched
//! platform manifests by digest, then the index by digest, and the tag last, only if the source
//! tag still points at what was patched. Whatever the target already holds is not sent again.

use std::collections::HashSet;

use anyhow::{anyhow, bail, Context, Result};

use crate::digest_map::{ImageRecord, Recorder};
use crate::media::{Descriptor, Document};
use crate::plan::ImagePlan;
use crate::registry::{Registry, Repo};

/// What a push did, for the report and the digest map.
#[derive(Debug, Clone, Default)]
pub struct PushReport {
    pub blobs_uploaded: usize,
    pub blobs_mounted: usize,
    pub blobs_copied: usize,
    pub blobs_skipped: usize,
    pub bytes_uploaded: u64,
    pub manifests_pushed: usize,
    pub tag_moved: bool,
    /// Companion tags moved to their patched child.
    pub companions_moved: Vec<String>,
}

/// Options that change what a push may overwrite, and where originals are recorded.
#[derive(Clone, Copy, Default)]
pub struct PushOptions<'a> {
    /// Overwrite the tag even if it moved since it was read.
    pub force: bool,
    /// The digest map on disk: the plan is recorded there before any tag moves.
    pub recorder: Option<&'a Recorder>,
}

/// Writes the plan's originals to the digest map before a tag moves; a failure here stops
/// the push with every tag where it was.
fn record_before_tags(plan: &ImagePlan, opts: PushOptions<'_>) -> Result<()> {
    if let Some(r) = opts.recorder {
        let mut rec = ImageRecord::from_plan(plan, None);
        rec.in_progress = true;
        r.record(rec)
            .map_err(|e| anyhow!("{e}; no tag was moved for {}:{}", plan.source, plan.tag))?;
    }
    Ok(())
}

/// Whether a companion tag is this image's to move: it points at the original child, or
/// already at the patched one.
pub fn companion_is_ours(c: &crate::plan::Companion) -> bool {
    c.patched
        .as_ref()
        .is_some_and(|p| c.current == c.original_digest || c.current == p.digest)
}

/// Whether any companion of the plan still has to move.
pub fn companions_pending(plan: &ImagePlan) -> bool {
    plan.companions
        .iter()
        .any(|c| companion_is_ours(c) && c.patched.as_ref().is_some_and(|p| p.digest != c.current))
}

/// Makes one blob present in the target: skip, mount, or stream it across.
async fn ensure_blob(
    reg: &Registry,
    source: &Repo,
    target: &Repo,
    desc: &Descriptor,
    seen: &mut HashSet<String>,
    rep: &mut PushReport,
) -> Result<()> {
    if !seen.insert(desc.digest.clone()) {
        return Ok(());
    }
    if reg.blob_exists(target, &desc.digest).await? {
        rep.blobs_skipped += 1;
        return Ok(());
    }
    if source.registry == target.registry
        && source.repository != target.repository
        && reg.blob_mount(target, source, &desc.digest).await
    {
        rep.blobs_mounted += 1;
        return Ok(());
    }
    reg.blob_copy(source, target, desc).await?;
    rep.blobs_copied += 1;
    Ok(())
}

/// Uploads a blob this tool made, unless the target has it.
async fn put_new_blob(
    reg: &Registry,
    target: &Repo,
    digest: &str,
    bytes: &[u8],
    seen: &mut HashSet<String>,
    rep: &mut PushReport,
) -> Result<()> {
    if !seen.insert(digest.to_owned()) {
        return Ok(());
    }
    if reg.blob_exists(target, digest).await? {
        rep.blobs_skipped += 1;
        return Ok(());
    }
    reg.blob_put(target, digest, bytes.to_vec()).await?;
    rep.blobs_uploaded += 1;
    rep.bytes_uploaded += bytes.len() as u64;
    Ok(())
}

/// PUTs a manifest by digest unless the target already has it.
async fn put_manifest_by_digest(
    reg: &Registry,
    target: &Repo,
    doc: &Document,
    rep: &mut PushReport,
) -> Result<()> {
    if reg
        .manifest_digest(&target.at_digest(&doc.digest))
        .await?
        .as_deref()
        == Some(doc.digest.as_str())
    {
        return Ok(());
    }
    reg.manifest_put(&target.at_digest(&doc.digest), doc)
        .await?;
    rep.manifests_pushed += 1;
    Ok(())
}

fn descriptors(doc: &Document) -> Result<Vec<Descriptor>> {
    let m = crate::image::Manifest::parse(doc, &doc.digest).map_err(|e| anyhow!(e))?;
    Ok(m.blobs().cloned().collect())
}

/// Makes a whole image (index or manifest, with every child and blob) present in `target`,
/// by digest only; used to restore originals into another repository.
pub async fn copy_image(
    reg: &Registry,
    source: &Repo,
    target: &Repo,
    doc: &Document,
) -> Result<PushReport> {
    let mut rep = PushReport::default();
    let mut seen = HashSet::new();
    if source == target {
        return Ok(rep);
    }
    let what = format!("{source}@{}", doc.digest);
    let children: Vec<Document> =
        match crate::image::View::parse(doc, &what).map_err(|e| anyhow!(e))? {
            crate::image::View::Index(index) => {
                let mut v = Vec::new();
                for c in &index.children {
                    v.push(
                        reg.manifest_get(&source.at_digest(&c.descriptor.digest))
                            .await?,
                    );
                }
                v
            }
            crate::image::View::Manifest(_) => vec![doc.clone()],
        };
    for child in &children {
        for d in descriptors(child)? {
            ensure_blob(reg, source, target, &d, &mut seen, &mut rep).await?;
        }
        put_manifest_by_digest(reg, target, child, &mut rep).await?;
    }
    put_manifest_by_digest(reg, target, doc, &mut rep).await?;
    Ok(rep)
}

/// Points the target tag at the source image as it is (one that already carries the patch),
/// copying it into the target repository first when that is another one.
pub async fn publish_as_is(
    reg: &Registry,
    plan: &ImagePlan,
    opts: PushOptions<'_>,
) -> Result<PushReport> {
    let mut rep = copy_image(reg, &plan.source, &plan.target, &plan.original).await?;
    let tref = plan.target.at_tag(&plan.target_tag);
    if reg.manifest_digest(&tref).await?.as_deref() != Some(plan.original.digest.as_str()) {
        record_before_tags(plan, opts)?;
        reg.manifest_put(&tref, &plan.original).await?;
        rep.tag_moved = true;
    }
    Ok(rep)
}

/// Pushes a patched plan. The tag is written last; any failure before leaves it untouched.
pub async fn push(reg: &Registry, plan: &ImagePlan, opts: PushOptions<'_>) -> Result<PushReport> {
    let Some(new_top) = &plan.new_top else {
        bail!("nothing to push for {}:{}", plan.source, plan.tag);
    };
    let (source, target) = (&plan.source, &plan.target);
    let other_repo = source != target;
    let mut rep = PushReport::default();
    let mut seen = HashSet::new();

    for p in &plan.platforms {
        match &p.new {
            Some(new) => {
                let kept = descriptors(&p.original)?;
                if other_repo {
                    // Every original layer (the config is replaced).
                    for d in kept.iter().skip(1) {
                        ensure_blob(reg, source, target, d, &mut seen, &mut rep)
                            .await
                            .with_context(|| format!("copying {} layers", p.platform))?;
                    }
                }
                for layer in &new.layers {
                    put_new_blob(
                        reg,
                        target,
                        &layer.digest,
                        &layer.bytes,
                        &mut seen,
                        &mut rep,
                    )
                    .await?;
                }
                put_new_blob(
                    reg,
                    target,
                    &new.config_digest,
                    &new.config,
                    &mut seen,
                    &mut rep,
                )
                .await?;
                put_manifest_by_digest(reg, target, &new.manifest, &mut rep).await?;
            }
            None if other_repo => {
                for d in descriptors(&p.original)? {
                    ensure_blob(reg, source, target, &d, &mut seen, &mut rep).await?;
                }
                put_manifest_by_digest(reg, target, &p.original, &mut rep).await?;
            }
            None => {}
        }
    }
    // For a single-manifest tag this is the manifest just pushed, and the HEAD skips it.
    put_manifest_by_digest(reg, target, new_top, &mut rep).await?;

    // The source tag must still point at what was read, or this would overwrite someone's push.
    let now = reg.manifest_digest(&source.at_tag(&plan.tag)).await?;
    // Another run that made the same (reproducible) image got there first: nothing to move.
    let same_tag = source == target && plan.tag == plan.target_tag;
    let done_by_other = same_tag && now.as_deref() == Some(new_top.digest.as_str());
    if now.as_deref() != Some(plan.original.digest.as_str()) && !opts.force && !done_by_other {
        bail!(
            "{}:{} moved while patching (was {}, now {}); not overwriting it (use --force to override)",
            source,
            plan.tag,
            plan.original.digest,
            now.as_deref().unwrap_or("absent")
        );
    }
    let tref = target.at_tag(&plan.target_tag);
    record_before_tags(plan, opts)?;
    if reg.manifest_digest(&tref).await?.as_deref() != Some(new_top.digest.as_str()) {
        reg.manifest_put(&tref, new_top).await?;
        rep.tag_moved = true;
        let served = reg.manifest_digest(&tref).await?;
        if served.as_deref() != Some(new_top.digest.as_str()) {
            bail!(
                "{target}:{} serves {} after the push, not {}",
                plan.target_tag,
                served.as_deref().unwrap_or("nothing"),
                new_top.digest
            );
        }
    }
    move_companions(reg, plan, opts, &mut rep).await?;
    Ok(rep)
}

/// Moves the companion tags (`<tag>-linux-<arch>`) of a patched image onto their patched child,
/// each only while it still points at the original child; one already there counts as moved.
/// A companion pointing elsewhere is someone else's and is left alone.
async fn move_companions(
    reg: &Registry,
    plan: &ImagePlan,
    opts: PushOptions<'_>,
    rep: &mut PushReport,
) -> Result<()> {
    let (source, target) = (&plan.source, &plan.target);
    let same_tag = source == target && plan.tag == plan.target_tag;
    for c in &plan.companions {
        let Some(patched) = &c.patched else { continue };
        if !companion_is_ours(c) {
            tracing::warn!(
                "{source}:{} points at {}, not at the {} child {}; left as it is",
                c.source_tag,
                c.current,
                c.platform,
                c.original_digest
            );
            continue;
        }
        let cref = target.at_tag(&c.target_tag);
        if same_tag && c.current == patched.digest {
            rep.companions_moved.push(c.target_tag.clone());
            continue;
        }
        let now = reg.manifest_digest(&source.at_tag(&c.source_tag)).await?;
        let done_by_other = same_tag && now.as_deref() == Some(patched.digest.as_str());
        if now.as_deref() != Some(c.original_digest.as_str()) && !opts.force && !done_by_other {
            tracing::warn!(
                "{source}:{} moved while patching; left as it is",
                c.source_tag
            );
            continue;
        }
        if reg.manifest_digest(&cref).await?.as_deref() != Some(patched.digest.as_str()) {
            reg.manifest_put(&cref, patched).await.with_context(|| {
                format!(
                    "moving companion {target}:{} to the patched {}",
                    c.target_tag, c.platform
                )
            })?;
        }
        rep.companions_moved.push(c.target_tag.clone());
    }
    Ok(())
}

/// Completes an image that already carries the patch but whose companion tags still point at
/// original children (a run failed or was killed between the tag and its companions).
pub async fn complete_companions(
    reg: &Registry,
    plan: &ImagePlan,
    opts: PushOptions<'_>,
) -> Result<PushReport> {
    let mut rep = PushReport::default();
    record_before_tags(plan, opts)?;
    move_companions(reg, plan, opts, &mut rep).await?;
    Ok(rep)
}
