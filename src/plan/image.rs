//! The plan of one tag: every platform planned (concurrently, each holding one of the run's
//! scan permits), the image's outcome, the new index, and the companion tags to move.

use std::collections::HashMap;
use std::sync::Arc;

use crate::image;
use crate::media::{Document, Kind};
use crate::patch::Outcome;
use crate::plan::companions::companions;
use crate::plan::platform::plan_platform;
use crate::plan::types::{Error, ImagePlan, PlatformPlan, Run};
use crate::rewrite;
use crate::select::{Job, Platforms};

/// Plans one tag: resolves it, scans each of the job's platforms (an index with thousands of
/// children opens at most the run's number of scans at once; a platform the job leaves out is
/// not read) and builds what is new.
pub async fn plan_image(run: Arc<Run>, job: &Job) -> Result<ImagePlan, Error> {
    let (source, tag, target, target_tag) = (&job.source, &job.tag, &job.target, &job.target_tag);
    let top = run.reg.manifest_get(&source.at_tag(tag)).await?;
    let src = format!("{source}:{tag}");
    let parsed = image::Top::parse(&top, &src)?;
    let kind = top
        .kind()
        .ok_or_else(|| Error::Image(format!("{src} is neither a manifest nor an index")))?;
    let only = job.platforms.as_ref();
    let (platforms, dropped) = plan_platforms(&run, job, &top, parsed, &src).await?;
    for name in only.map(Platforms::names).unwrap_or_default() {
        let one = Platforms::new([name.clone()]);
        if !platforms.iter().any(|p| one.allows(&p.platform)) {
            tracing::warn!("{src}: has no platform {name}, which its selection names");
        }
    }
    let (outcome, reason) = image_outcome(&platforms);
    let new_top = if outcome == Outcome::Patched {
        new_top(&top, kind, &platforms)?
    } else {
        None
    };
    let companions = match kind {
        Kind::Index(_) => companions(&run.reg, source, tag, target_tag, &platforms)
            .await
            .map_err(|e| match e {
                Error::Tag(m) => Error::Tag(format!("companion of {src}: {m}")),
                other => other,
            })?,
        Kind::Manifest(_) => Vec::new(),
    };
    let recorded_original = match (outcome, kind) {
        (Outcome::AlreadyPatched, Kind::Index(_)) => rewrite::index_recorded_original(&top),
        (Outcome::AlreadyPatched, Kind::Manifest(_)) => {
            platforms.first().and_then(|p| p.recorded_original.clone())
        }
        _ => None,
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

/// Plans every platform of the image (an index's children, attestations left out and named,
/// or the single manifest).
async fn plan_platforms(
    run: &Arc<Run>,
    job: &Job,
    top: &Document,
    parsed: image::Top,
    src: &str,
) -> Result<(Vec<PlatformPlan>, Vec<String>), Error> {
    let (source, tag) = (&job.source, &job.tag);
    let index = match parsed {
        image::Top::Index(index) => index,
        image::Top::Manifest(_) => {
            let _permit = run.scans.clone().acquire_owned().await;
            let only = job.platforms.as_ref();
            let p = plan_platform(run, source, tag, String::new(), top.clone(), only).await?;
            return Ok((vec![p], Vec::new()));
        }
    };
    if index.children.is_empty() {
        return Err(Error::Image(format!("index {src} lists no manifests")));
    }
    let mut dropped = Vec::new();
    let mut jobs = Vec::new();
    for child in &index.children {
        let desc = child.descriptor.clone();
        if child.attestation {
            dropped.push(desc.digest);
            continue;
        }
        let platform = child.platform.clone();
        let (run, source, tag) = (run.clone(), source.clone(), tag.to_owned());
        let only = job.platforms.clone();
        jobs.push(tokio::spawn(async move {
            let _permit = run.scans.clone().acquire_owned().await;
            let child = run
                .reg
                .manifest_get(&source.at_digest(&desc.digest))
                .await?;
            if !matches!(child.kind(), Some(Kind::Manifest(_))) {
                return Err(Error::Image(format!(
                    "{platform} child {} of {source} is {:?}, not an image manifest",
                    desc.digest, child.media_type
                )));
            }
            plan_platform(&run, &source, &tag, platform, child, only.as_ref()).await
        }));
    }
    let mut platforms = Vec::new();
    for job in jobs {
        platforms.push(job.await.map_err(|e| Error::Task(e.to_string()))??);
    }
    Ok((platforms, dropped))
}

/// The image's outcome: refused when any platform is (naming the first), else the greatest of
/// its platforms'.
fn image_outcome(platforms: &[PlatformPlan]) -> (Outcome, String) {
    if let Some(first) = platforms.iter().find(|p| p.outcome == Outcome::Refused) {
        return (
            Outcome::Refused,
            format!("{}: {}", first.platform, first.reason),
        );
    }
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
}

/// The new index (each patched child replaced in place, the original recorded), or the new
/// manifest of a single-manifest tag.
fn new_top(
    top: &Document,
    kind: Kind,
    platforms: &[PlatformPlan],
) -> Result<Option<Document>, Error> {
    if let Kind::Manifest(_) = kind {
        return Ok(platforms
            .first()
            .and_then(|p| p.new.as_ref())
            .map(|n| n.manifest.clone()));
    }
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
    let (doc, _) = rewrite::index_replace(top, &replaced)?;
    let doc = rewrite::index_record_original(&doc, &top.digest)?;
    Ok(Some(doc))
}
