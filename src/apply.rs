//! Applying the patches to one image, end to end: plan it, then, as the plan says, attach its
//! provenance and push it (or publish an already patched image under the target name, or
//! complete the companion tags a killed run left behind), recording the originals in the
//! digest map before any tag moves. The binary calls this once per tag and prints the result.

use std::sync::Arc;

use crate::digest_map::{ImageRecord, Recorder};
use crate::patch::Outcome;
use crate::plan::{plan_image, ImagePlan, Run};
use crate::provenance::{self, Attached, Attachment};
use crate::push::{complete_companions, publish_as_is, push, PushOptions, PushReport};
use crate::registry::Registry;
pub use crate::select::Job;

/// Why an image could not be applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Plan(#[from] crate::plan::Error),
    #[error(transparent)]
    Push(#[from] crate::push::Error),
    #[error(transparent)]
    Provenance(#[from] crate::provenance::Error),
    #[error(transparent)]
    Map(#[from] crate::digest_map::Error),
}

/// What an `apply` (or `plan`) run does with each image.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Plan only: push nothing, record nothing.
    pub dry_run: bool,
    /// Overwrite a tag even if it moved since it was read.
    pub force: bool,
    /// Attach a provenance statement to each patched platform.
    pub provenance: bool,
}

/// What applying one image did.
#[derive(Debug)]
pub struct Applied {
    pub plan: ImagePlan,
    /// What was pushed; `None` when nothing was (a dry run, or nothing to do).
    pub push: Option<PushReport>,
    /// The provenance artifacts built for it (attached unless a dry run).
    pub attachments: Vec<Attachment>,
    /// The digest map's record of it (also written to the map, when there is one).
    pub record: ImageRecord,
}

/// For an image that already carries the patch but cannot tell a companion's original itself
/// (patched before images named their originals), the digest map of an earlier run can.
fn companions_from_map(plan: &mut ImagePlan, recorder: Option<&Recorder>) {
    let Some(r) = recorder else { return };
    let images = r.images();
    for c in &mut plan.companions {
        let Some(patched) = &c.patched else { continue };
        if c.original_digest != patched.digest || c.current == patched.digest {
            continue;
        }
        let target = format!("{}:{}", plan.target, c.target_tag);
        let known = images.iter().rev().flat_map(|i| &i.companions).find(|k| {
            k.target == target && k.patched_digest.as_deref() == Some(patched.digest.as_str())
        });
        if let Some(k) = known {
            if k.original_digest == c.current {
                c.original_digest = k.original_digest.clone();
            }
        }
    }
}

/// Applies every job, `at_once` images at a time (their platforms within the run's scan
/// permits), and gives each job back with what came of it, in the jobs' order.
pub async fn apply_all(
    run: Arc<Run>,
    jobs: Vec<Job>,
    opts: Options,
    recorder: Option<&Recorder>,
    at_once: usize,
) -> Vec<(Job, Result<Applied, Error>)> {
    use futures_util::StreamExt;
    futures_util::stream::iter(jobs.into_iter().map(|job| {
        let run = run.clone();
        async move {
            let result = apply_image(run, &job, opts, recorder).await;
            (job, result)
        }
    }))
    .buffered(at_once.max(1))
    .collect()
    .await
}

/// Plans one image and does what its plan says; the record is written to `recorder` (when
/// given) as the image finishes, and before any tag moves.
pub async fn apply_image(
    run: Arc<Run>,
    job: &Job,
    opts: Options,
    recorder: Option<&Recorder>,
) -> Result<Applied, Error> {
    let reg = run.reg.clone();
    let mut plan = plan_image(run, job).await?;
    companions_from_map(&mut plan, recorder);
    for p in &plan.platforms {
        tracing::info!("{} {}: {}: {}", job.tag, p.platform, p.outcome, p.reason);
    }
    let mut attachments = Vec::new();
    let mut signatures = Vec::new();
    if plan.outcome == Outcome::Patched {
        if opts.provenance {
            attachments = provenance::build(&plan)?;
        }
        let pairs = provenance::digest_pairs(&plan);
        signatures = provenance::signatures(&reg, &job.source, &pairs).await?;
    }
    let push_opts = PushOptions {
        force: opts.force,
        recorder,
    };
    let (pushed, attached) = if opts.dry_run {
        (None, Vec::new())
    } else {
        write(&reg, &plan, &attachments, push_opts).await?
    };
    let moved = pushed
        .as_ref()
        .map(|r| r.companions_moved.clone())
        .unwrap_or_default();
    let mut record = crate::plan::record(&plan, &moved);
    provenance::fill_record(&mut record, &attachments, &attached, signatures);
    if let Some(r) = recorder {
        r.record(record.clone())?;
    }
    warn_of(&job.tag, &record);
    Ok(Applied {
        plan,
        push: pushed,
        attachments,
        record,
    })
}

/// Warns of what a record says that the run does not fix: the source's signatures, which do
/// not cover the patched image, what a platform's patches may break, dropped attestations.
fn warn_of(tag: &str, rec: &ImageRecord) {
    for s in &rec.signatures {
        tracing::warn!(
            "{tag}: {} {} covers the original {}, not the patched image; it is not moved or copied",
            s.kind,
            s.reference,
            s.covers
        );
    }
    for p in &rec.platforms {
        for w in &p.warnings {
            tracing::warn!("{tag} {}: {w}", p.platform);
        }
    }
    for d in &rec.dropped_attestations {
        tracing::warn!("{tag}: attestation manifest {d} left out of the patched index (it describes the unpatched image)");
    }
}

impl Applied {
    /// Writes the provenance statements of what was pushed (none after a dry run, or when
    /// nothing was) to `dir`, for signing.
    pub fn write_statements(&self, dir: &std::path::Path) -> Result<(), provenance::Error> {
        match self.push {
            Some(_) => provenance::write_statements(dir, &self.attachments),
            None => Ok(()),
        }
    }
}

/// The writes a plan calls for: an already patched source published under the target name
/// (its provenance first), companions an earlier run left on original children, or a patched
/// image's provenance and push.
async fn write(
    reg: &Registry,
    plan: &ImagePlan,
    attachments: &[Attachment],
    opts: PushOptions<'_>,
) -> Result<(Option<PushReport>, Vec<Attached>), Error> {
    let tag = &plan.tag;
    match plan.outcome {
        Outcome::AlreadyPatched if plan.elsewhere() => {
            // The source already carries the patch: the target name gets that image, and its
            // provenance goes with it (first: the tag is the last write).
            for p in &plan.platforms {
                provenance::copy_attached(reg, &plan.source, &plan.target, &p.original).await?;
            }
            let r = publish_as_is(reg, plan, opts).await?;
            tracing::info!(
                "{tag}: already patched; {}:{} now points at it",
                plan.target,
                plan.target_tag
            );
            Ok((Some(r), Vec::new()))
        }
        Outcome::AlreadyPatched if plan.companions_pending() => {
            // An earlier run moved the tag but not every companion: finish its work.
            let r = complete_companions(reg, plan, opts).await?;
            tracing::info!(
                "{tag}: already patched; moved {} companion tag(s) left on original children",
                r.companions_moved.len()
            );
            Ok((Some(r), Vec::new()))
        }
        Outcome::Patched => {
            let attached = attach_all(reg, plan, attachments).await?;
            let r = push(reg, plan, opts).await?;
            tracing::info!(
                "{tag}: pushed {}:{} ({} blob(s) uploaded, {} bytes; {} mounted, {} copied, {} already there; {} manifest(s))",
                plan.target, plan.target_tag, r.blobs_uploaded, r.bytes_uploaded, r.blobs_mounted,
                r.blobs_copied, r.blobs_skipped, r.manifests_pushed
            );
            Ok((Some(r), attached))
        }
        _ => Ok((None, Vec::new())),
    }
}

/// Attaches each provenance artifact before the push: a failure leaves the tag as it was, and
/// a re-run (which sees the tag unpatched) attaches it then.
async fn attach_all(
    reg: &Registry,
    plan: &ImagePlan,
    attachments: &[Attachment],
) -> Result<Vec<Attached>, Error> {
    let mut attached = Vec::new();
    for att in attachments {
        let done = provenance::attach(reg, &plan.target, att).await?;
        tracing::info!(
            "{} {}: provenance {} {} ({})",
            plan.tag,
            att.platform,
            att.manifest.digest,
            if done.pushed {
                "attached"
            } else {
                "already attached"
            },
            done.via
        );
        attached.push(done);
    }
    Ok(attached)
}
