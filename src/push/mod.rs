//! Pushing a plan in the order that never leaves a dangling reference: blobs, then patched
//! platform manifests by digest, then the index by digest, and the tag last, only if the source
//! tag still points at what was patched. Whatever the target already holds is not sent again.
//! Before any tag moves, the digest map records its original.

mod companions;
pub mod error;
mod options;
mod session;

pub use companions::complete_companions;
pub use error::Error;
pub use options::PushOptions;
pub use session::PushReport;

use crate::media::Document;
use crate::plan::{ImagePlan, PlatformPlan};
use crate::push::companions::move_companions;
use crate::push::error::context;
use crate::push::options::record_before_tags;
use crate::push::session::{descriptors, Session};
use crate::registry::{Registry, Repo};

/// Makes a whole image (index or manifest, with every child and blob) present in `target`,
/// by digest only; used to restore originals into another repository.
pub async fn copy_image(
    reg: &Registry,
    source: &Repo,
    target: &Repo,
    doc: &Document,
) -> Result<PushReport, Error> {
    let mut s = Session::new(reg, source, target);
    if source == target {
        return Ok(s.rep);
    }
    let what = format!("{source}@{}", doc.digest);
    let children: Vec<Document> = match crate::image::Top::parse(doc, &what)? {
        crate::image::Top::Index(index) => {
            let mut v = Vec::new();
            for c in &index.children {
                v.push(
                    reg.manifest_get(&source.at_digest(&c.descriptor.digest))
                        .await?,
                );
            }
            v
        }
        crate::image::Top::Manifest(_) => vec![doc.clone()],
    };
    for child in &children {
        s.copy_manifest(child).await?;
    }
    s.put_manifest(doc).await?;
    Ok(s.rep)
}

/// Points the target tag at the source image as it is (one that already carries the patch),
/// copying it into the target repository first when that is another one.
pub async fn publish_as_is(
    reg: &Registry,
    plan: &ImagePlan,
    opts: PushOptions<'_>,
) -> Result<PushReport, Error> {
    let mut rep = copy_image(reg, &plan.source, &plan.target, &plan.original).await?;
    let tref = plan.target.at_tag(&plan.target_tag);
    if reg.manifest_digest(&tref).await?.as_deref() != Some(plan.original.digest.as_str()) {
        record_before_tags(plan, opts)?;
        reg.manifest_put(&tref, &plan.original).await?;
        rep.tag_moved = true;
    }
    Ok(rep)
}

/// Pushes one platform: a patched one's original layers (into another repository), new
/// layers, config and manifest; an unpatched one copied as it is into another repository.
async fn push_platform(s: &mut Session<'_>, p: &PlatformPlan) -> Result<(), Error> {
    let other_repo = s.source != s.target;
    let Some(new) = &p.new else {
        if other_repo {
            s.copy_manifest(&p.original).await?;
        }
        return Ok(());
    };
    if other_repo {
        // Every original layer (the config is replaced).
        for d in descriptors(&p.original)?.iter().skip(1) {
            let copied = s.ensure_blob(d).await;
            context(copied, || format!("copying {} layers", p.platform))?;
        }
    }
    for layer in &new.layers {
        s.put_new_layer(layer).await?;
    }
    s.put_new_blob(&new.config_digest, &new.config).await?;
    s.put_manifest(&new.manifest).await
}

/// Pushes a patched plan. The tag is written last; any failure before leaves it untouched.
pub async fn push(
    reg: &Registry,
    plan: &ImagePlan,
    opts: PushOptions<'_>,
) -> Result<PushReport, Error> {
    let Some(new_top) = &plan.new_top else {
        return Err(Error::Plan(format!(
            "nothing to push for {}:{}",
            plan.source, plan.tag
        )));
    };
    let mut s = Session::new(reg, &plan.source, &plan.target);
    for p in &plan.platforms {
        push_platform(&mut s, p).await?;
    }
    // For a single-manifest tag this is the manifest just pushed, and the HEAD skips it.
    s.put_manifest(new_top).await?;
    let mut rep = s.rep;
    check_source_tag(reg, plan, new_top, opts).await?;
    record_before_tags(plan, opts)?;
    move_tag(reg, plan, new_top, &mut rep).await?;
    move_companions(reg, plan, opts, &mut rep).await?;
    Ok(rep)
}

/// The source tag must still point at what was read, or this would overwrite someone's push.
async fn check_source_tag(
    reg: &Registry,
    plan: &ImagePlan,
    new_top: &Document,
    opts: PushOptions<'_>,
) -> Result<(), Error> {
    let (source, target) = (&plan.source, &plan.target);
    let now = reg.manifest_digest(&source.at_tag(&plan.tag)).await?;
    // Another run that made the same (reproducible) image got there first: nothing to move.
    let same_tag = source == target && plan.tag == plan.target_tag;
    let done_by_other = same_tag && now.as_deref() == Some(new_top.digest.as_str());
    if now.as_deref() != Some(plan.original.digest.as_str()) && !opts.force && !done_by_other {
        return Err(Error::Moved(format!(
            "{}:{} moved while patching (was {}, now {}); not overwriting it (use --force to override)",
            source,
            plan.tag,
            plan.original.digest,
            now.as_deref().unwrap_or("absent")
        )));
    }
    Ok(())
}

/// Writes the target tag (unless it already serves the new top) and checks what it serves.
async fn move_tag(
    reg: &Registry,
    plan: &ImagePlan,
    new_top: &Document,
    rep: &mut PushReport,
) -> Result<(), Error> {
    let tref = plan.target.at_tag(&plan.target_tag);
    if reg.manifest_digest(&tref).await?.as_deref() == Some(new_top.digest.as_str()) {
        return Ok(());
    }
    reg.manifest_put(&tref, new_top).await?;
    rep.tag_moved = true;
    let served = reg.manifest_digest(&tref).await?;
    if served.as_deref() != Some(new_top.digest.as_str()) {
        return Err(Error::Served(format!(
            "{}:{} serves {} after the push, not {}",
            plan.target,
            plan.target_tag,
            served.as_deref().unwrap_or("nothing"),
            new_top.digest
        )));
    }
    Ok(())
}
