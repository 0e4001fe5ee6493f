//! What a push may overwrite, and where it records originals before any tag moves.

use crate::digest_map::Recorder;
use crate::plan::ImagePlan;
use crate::push::error::Error;

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
pub(crate) fn record_before_tags(plan: &ImagePlan, opts: PushOptions<'_>) -> Result<(), Error> {
    if let Some(r) = opts.recorder {
        let mut rec = crate::plan::record(plan, &[]);
        rec.in_progress = true;
        r.record(rec).map_err(|e| {
            Error::Record(format!(
                "{e}; no tag was moved for {}:{}",
                plan.source, plan.tag
            ))
        })?;
    }
    Ok(())
}
