//! Moving the per-platform companion tags (`<tag>-linux-<arch>`) of a patched image onto their
//! patched children, and completing those a failed or killed run left behind.

use crate::plan::ImagePlan;
use crate::push::error::{context, Error};
use crate::push::options::{record_before_tags, PushOptions};
use crate::push::session::PushReport;
use crate::registry::Registry;

/// Moves each companion onto its patched child, only while it still points at the original
/// child; one already there counts as moved. A companion pointing elsewhere is someone else's
/// and is left alone.
pub(crate) async fn move_companions(
    reg: &Registry,
    plan: &ImagePlan,
    opts: PushOptions<'_>,
    rep: &mut PushReport,
) -> Result<(), Error> {
    let (source, target) = (&plan.source, &plan.target);
    let same_tag = source == target && plan.tag == plan.target_tag;
    for c in &plan.companions {
        let Some(patched) = &c.patched else { continue };
        if !c.is_ours() {
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
            let put = reg.manifest_put(&cref, patched).await.map_err(Error::from);
            context(put, || {
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
) -> Result<PushReport, Error> {
    let mut rep = PushReport::default();
    record_before_tags(plan, opts)?;
    move_companions(reg, plan, opts, &mut rep).await?;
    Ok(rep)
}
