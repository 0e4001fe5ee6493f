//! `runner-patch apply`: resolve the tags, plan each image, push what is patched, report, and
//! write the digest map of everything that was completed.

use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use futures_util::StreamExt;

use super::Status;
use crate::cli::{Backend, Global, ImageArgs};
use runner_patch::digest_map::{DigestMap, ImageRecord, Recorder};
use runner_patch::patch::{Outcome, Patch};
use runner_patch::plan::{plan_image, ImagePlan, Run};
use runner_patch::provenance;
use runner_patch::push::{
    companions_pending, complete_companions, publish_as_is, push, PushOptions, PushReport,
};
use runner_patch::registry::{Registry, Repo, Settings};
use runner_patch::units::human;

/// Checks that an explicit tag belongs to the backend.
fn check_tag(backend: Backend, tag: &str) -> Result<()> {
    let p = backend.prefix();
    let ok = tag
        .strip_prefix(p)
        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()));
    if !ok {
        bail!("tag {tag:?} is not a {p} tag (expected {p}<version>-..., e.g. {p}12.9-vllm0.27.1)");
    }
    runner_patch::tags::check(tag).map_err(|e| anyhow!(e))
}

/// Checks the name a tag gets in the target before anything is read or pushed.
fn check_target_tag(tag: &str, suffix: &str) -> Result<()> {
    runner_patch::tags::check(&format!("{tag}{suffix}"))
        .map_err(|e| anyhow!("target of {tag:?} with --tag-suffix {suffix:?}: {e}"))
}

/// Lists the repository and keeps the backend's multi-arch tags that some patch is for.
async fn discover(
    reg: &Registry,
    repo: &Repo,
    backend: Backend,
    patches: &[Patch],
    include_dev: bool,
) -> Result<Vec<String>> {
    let mut tags: Vec<String> = reg
        .tags_list(repo)
        .await?
        .into_iter()
        .filter(|t| runner_patch::tags::discovers(patches, backend.prefix(), t, include_dev))
        .collect();
    tags.sort();
    tracing::info!(
        "found {} affected {} tag(s) in {repo}",
        tags.len(),
        backend.prefix()
    );
    Ok(tags)
}

/// One tag's end: a plan (and what its push did), or an error.
struct Finished {
    tag: String,
    result: Result<(ImagePlan, Option<PushReport>, Record, ImageRecord)>,
}

/// The record beside a patched image: provenance artifacts (and what attaching them did) and
/// the source's own signatures.
#[derive(Default)]
struct Record {
    attachments: Vec<provenance::Attachment>,
    attached: Vec<provenance::Attached>,
    signatures: Vec<provenance::SignatureRecord>,
}

/// What to do with the plans: push them (and where to write the map), or only show them.
pub struct Mode<'a> {
    pub dry_run: bool,
    pub force: bool,
    pub manifest: Option<&'a std::path::Path>,
    /// Where each provenance statement is also written.
    pub provenance_dir: Option<&'a std::path::Path>,
}

/// `apply` and `plan`: plan every tag, then push (unless a dry run) and report.
pub fn run(g: &Global, a: &ImageArgs, mode: Mode<'_>) -> Result<Status> {
    let patches = super::load_patches(g).map_err(|e| anyhow!(e))?;
    let map_patch = super::map_patch_name(&patches);
    let source = Repo::parse(&a.repository).map_err(|e| anyhow!("--repository: {e}"))?;
    let target = match &a.target_repository {
        Some(t) => Repo::parse(t).map_err(|e| anyhow!("--target-repository: {e}"))?,
        None => source.clone(),
    };
    if !a
        .tag_suffix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        bail!(
            "--tag-suffix {:?} may hold only letters, digits, '.', '_' and '-'",
            a.tag_suffix
        );
    }
    // The same tag given twice is one image (and one record).
    let mut tags: Vec<String> = Vec::new();
    for t in &a.tags {
        check_tag(a.backend, t)?;
        check_target_tag(t, &a.tag_suffix)?;
        if !tags.contains(t) {
            tags.push(t.clone());
        }
    }
    if a.jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    // The map must be writable before any registry is touched: a tag never moves without
    // its original on disk.
    let recorder = match mode.manifest {
        Some(path) if !mode.dry_run => {
            Some(Recorder::open(path, &map_patch).map_err(|e| anyhow!(e))?)
        }
        _ => None,
    };
    runner_patch::scan_cache::configure(a.no_cache, a.cache_dir.clone());
    super::runtime()?.block_on(run_async(
        patches,
        source,
        target,
        a,
        tags,
        mode,
        recorder.as_ref(),
        super::registry_settings(g),
    ))
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

#[allow(clippy::too_many_arguments)]
async fn run_async(
    patches: Vec<Patch>,
    source: Repo,
    target: Repo,
    a: &ImageArgs,
    tags: Vec<String>,
    mode: Mode<'_>,
    recorder: Option<&Recorder>,
    settings: Settings,
) -> Result<Status> {
    // Requests in flight: four per tag at once (platforms, and a copy's read and write).
    let reg = Arc::new(Registry::new(
        &[&source, &target],
        settings.with_max_requests(a.jobs.saturating_mul(4)),
    )?);
    let tags = if tags.is_empty() {
        let found = discover(&reg, &source, a.backend, &patches, a.include_dev).await?;
        for t in &found {
            check_target_tag(t, &a.tag_suffix)?;
        }
        found
    } else {
        tags
    };
    let opts = PushOptions {
        force: mode.force,
        recorder,
    };
    let map_patch = super::map_patch_name(&patches);
    let run = Arc::new(Run {
        reg: reg.clone(),
        patches,
        // `--jobs` bounds the platform scans of the whole run, not only the tags at once.
        scans: Arc::new(tokio::sync::Semaphore::new(a.jobs)),
        layers: Default::default(),
    });
    let finished: Vec<Finished> = futures_util::stream::iter(tags.into_iter().map(|tag| {
        let (reg, run, source, target) = (reg.clone(), run.clone(), source.clone(), target.clone());
        let target_tag = format!("{tag}{}", a.tag_suffix);
        let dry_run = mode.dry_run;
        let with_provenance = !a.no_provenance;
        async move {
            let result = async {
                let mut plan = plan_image(run, &source, &tag, &target, &target_tag).await?;
                companions_from_map(&mut plan, recorder);
                for p in &plan.platforms {
                    tracing::info!("{tag} {}: {}: {}", p.platform, p.outcome, p.reason);
                }
                let mut record = Record::default();
                if plan.outcome == Outcome::Patched {
                    if with_provenance {
                        record.attachments = provenance::build(&plan)?;
                    }
                    record.signatures = provenance::signatures(&reg, &source, &provenance::digest_pairs(&plan)).await?;
                }
                let elsewhere = plan.target != plan.source || plan.target_tag != plan.tag;
                let report = if plan.outcome == Outcome::AlreadyPatched && elsewhere && !dry_run {
                    // The source already carries the patch: the target name gets that image,
                    // and its provenance goes with it (first: the tag is the last write).
                    for p in &plan.platforms {
                        provenance::copy_attached(&reg, &source, &target, &p.original).await?;
                    }
                    let r = publish_as_is(&reg, &plan, opts).await?;
                    tracing::info!("{tag}: already patched; {target}:{target_tag} now points at it");
                    Some(r)
                } else if plan.outcome == Outcome::AlreadyPatched && companions_pending(&plan) && !dry_run {
                    // An earlier run moved the tag but not every companion: finish its work.
                    let r = complete_companions(&reg, &plan, opts).await?;
                    tracing::info!(
                        "{tag}: already patched; moved {} companion tag(s) left on original children",
                        r.companions_moved.len()
                    );
                    Some(r)
                } else if plan.outcome == Outcome::Patched && !dry_run {
                    // Before the push: a failure here leaves the tag as it was, and a re-run
                    // (which sees the tag unpatched) attaches it then.
                    for att in &record.attachments {
                        let done = provenance::attach(&reg, &target, att).await?;
                        tracing::info!(
                            "{tag} {}: provenance {} {} ({})",
                            att.platform,
                            att.manifest.digest,
                            if done.pushed { "attached" } else { "already attached" },
                            done.via
                        );
                        record.attached.push(done);
                    }
                    let r = push(&reg, &plan, opts).await?;
                    tracing::info!(
                        "{tag}: pushed {target}:{target_tag} ({} blob(s) uploaded, {} bytes; {} mounted, {} copied, {} already there; {} manifest(s))",
                        r.blobs_uploaded, r.bytes_uploaded, r.blobs_mounted, r.blobs_copied, r.blobs_skipped, r.manifests_pushed
                    );
                    Some(r)
                } else {
                    None
                };
                let mut rec = ImageRecord::from_plan(&plan, report.as_ref());
                provenance::fill_record(
                    &mut rec,
                    &record.attachments,
                    &record.attached,
                    record.signatures.clone(),
                );
                if let Some(r) = recorder {
                    r.record(rec.clone()).map_err(|e| anyhow!(e))?;
                }
                Ok((plan, report, record, rec))
            }
            .await;
            Finished { tag, result }
        }
    }))
    .buffered(a.jobs)
    .collect()
    .await;

    let mut records = Vec::new();
    let mut status = Status::Success;
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for f in &finished {
        match &f.result {
            Ok((plan, pushed, record, rec)) => {
                let rec = rec.clone();
                for s in &rec.signatures {
                    tracing::warn!("{}: {} {} covers the original {}, not the patched image; it is not moved or copied", f.tag, s.kind, s.reference, s.covers);
                }
                if let (Some(dir), false) = (mode.provenance_dir, mode.dry_run || pushed.is_none())
                {
                    if let Err(e) = provenance::write_statements(dir, &record.attachments) {
                        eprintln!("runner-patch: error: {}:{}: {e:#}", source, f.tag);
                        status = Status::Error;
                    }
                }
                if plan.outcome == Outcome::Refused && status == Status::Success {
                    status = Status::Refused;
                }
                for d in &rec.dropped_attestations {
                    tracing::warn!("{}: attestation manifest {d} left out of the patched index (it describes the unpatched image)", f.tag);
                }
                rows.push(summary_row(&rec));
                records.push(rec);
            }
            Err(e) => {
                status = Status::Error;
                eprintln!("runner-patch: error: {}:{}: {e:#}", source, f.tag);
                errors.push((format!("{source}:{}", f.tag), format!("{e:#}")));
                rows.push(format!(
                    "{source}:{}\n  {:<16} see the error above",
                    f.tag, "error"
                ));
            }
        }
    }
    if let Some(r) = recorder {
        let targets: Vec<String> = records.iter().map(|r| r.target.clone()).collect();
        r.finish(&targets).map_err(|e| anyhow!(e))?;
    }
    let map = DigestMap::new(&map_patch, records);
    // The map on disk is already complete (each image was recorded as it finished); the
    // output comes after it, so a reader that goes away cannot cost the record.
    match (mode.manifest, recorder) {
        _ if mode.dry_run => tracing::info!("dry run: nothing pushed, no digest map written"),
        (Some(path), Some(r)) if r.wrote() => {
            tracing::info!("digest map written to {}", path.display())
        }
        (Some(path), _) if path.exists() => {
            tracing::warn!("no image completed; {} left as it was", path.display())
        }
        (Some(_), _) => tracing::warn!("no image completed; no digest map written"),
        (None, _) => {}
    }
    crate::summary::apply(&map, mode.dry_run, &errors);
    if a.json {
        crate::output::print(&serde_json::to_string_pretty(&map)?)?;
    } else {
        for r in rows {
            crate::output::print(&r)?;
        }
    }
    Ok(status)
}

fn summary_row(rec: &ImageRecord) -> String {
    let short = |d: &str| {
        d.strip_prefix("sha256:").map_or(d.to_owned(), |h| {
            format!("sha256:{}", &h[..12.min(h.len())])
        })
    };
    let digest = match &rec.patched_digest {
        Some(p) if *p != rec.original_digest => {
            format!("{} -> {}", short(&rec.original_digest), short(p))
        }
        _ => short(&rec.original_digest),
    };
    let mut row = format!("{}\n  {:<16} {}", rec.source, rec.outcome, digest);
    if rec.target != rec.source {
        row.push_str(&format!("\n  {:<16} {}", "target", rec.target));
    }
    for p in &rec.platforms {
        row.push_str(&format!(
            "\n  {:<16} {:<16} vllm {:<10} scan {:>10}  push {:>8}  {}",
            p.platform,
            p.outcome,
            p.vllm_version.as_deref().unwrap_or("?"),
            human(p.bytes_scanned),
            human(p.bytes_to_push),
            p.reason
        ));
    }
    row.push_str(&provenance::summary_lines(rec));
    for c in &rec.companions {
        let state = if c.moved {
            "moved"
        } else if c.patched_digest.is_some() {
            "to move"
        } else {
            "unchanged"
        };
        row.push_str(&format!(
            "\n  {:<16} {:<16} {}",
            c.platform, state, c.target
        ));
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_tags_must_be_the_backend_s() {
        assert!(check_tag(Backend::Cuda, "rocm7.2-vllm0.25.1").is_err());
        assert!(check_tag(Backend::Cuda, "cuda12.9-vllm0.27.1").is_ok());
    }
}
