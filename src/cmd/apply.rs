//! `runner-patch apply` and `plan`: select the tags through the library, apply (or plan) each
//! image, then report and finish the digest map.

use std::sync::Arc;

use anyhow::{anyhow, bail, Result};

use super::common::Status;
use crate::cli::{Backend, Global, ImageArgs};
use runner_patch::apply::{apply_all, Applied, Job, Options};
use runner_patch::digest_map::{DigestMap, Recorder};
use runner_patch::patch::Outcome;
use runner_patch::plan::Run;
use runner_patch::registry::{Registry, Repo};
use runner_patch::resolve::{Mode as ResolveMode, Resolver};
use runner_patch::scan_cache::ScanCache;
use runner_patch::select::{Request, Selection};
use runner_patch::visible::Layers;

/// What to do with the plans: push them (and where to write the map), or only show them.
pub struct Mode<'a> {
    pub dry_run: bool,
    pub force: bool,
    pub digest_map: Option<&'a std::path::Path>,
    /// Where each provenance statement is also written.
    pub provenance_dir: Option<&'a std::path::Path>,
    /// Where requirements patches' answers come from.
    pub resolve: ResolveMode,
    /// Print the summary (or the JSON map); `lock` prints its own.
    pub report: bool,
}

/// `--locked`: lock files only; else a matching lock file, or uv.
pub fn resolve_mode(locked: bool) -> ResolveMode {
    if locked {
        ResolveMode::Locked
    } else {
        ResolveMode::Auto
    }
}

/// `apply` and `plan`: select the tags (checked before anything else), plan every one, then
/// push (unless a dry run) and report; the run's resolver is returned for `lock`.
pub fn run(g: &Global, a: &ImageArgs, mode: Mode<'_>) -> Result<(Status, Arc<Resolver>)> {
    let selection = Selection::new(&Request {
        backend: a.backend.map(Backend::prefix),
        tags: &a.tags,
        matrix: a.matrix.as_deref(),
        include_dev: a.include_dev,
        tag_suffix: &a.tag_suffix,
        shard: a.shard.as_deref(),
    })?;
    let source = Repo::parse(&a.repository).map_err(|e| anyhow!("--repository: {e}"))?;
    let target = match &a.target_repository {
        Some(t) => Repo::parse(t).map_err(|e| anyhow!("--target-repository: {e}"))?,
        None => source.clone(),
    };
    if a.jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    let patches = super::common::load_patches(g)?;
    let map_patch = runner_patch::patch::catalogue::map_name(&patches);
    // The map must be writable before any registry is touched: a tag never moves without
    // its original on disk.
    let recorder = match mode.digest_map {
        Some(path) if !mode.dry_run => Some(Recorder::open(path, &map_patch)?),
        _ => None,
    };
    // Requests in flight: four per tag at once (platforms, and a copy's read and write).
    let settings = super::common::registry_settings(g).with_max_requests(a.jobs.saturating_mul(4));
    let reg = Registry::new(&[&source, &target], settings)?;
    let run = Arc::new(Run {
        reg: Arc::new(reg),
        patches,
        // `--jobs` bounds the platform scans of the whole run, not only the tags at once.
        scans: Arc::new(tokio::sync::Semaphore::new(a.jobs)),
        layers: Layers::new(ScanCache::at(a.no_cache, a.cache_dir.clone())),
        shared: Default::default(),
        resolver: Arc::new(Resolver::new(g.bounds.limits().idle, mode.resolve)),
    });
    let opts = Options {
        dry_run: mode.dry_run,
        force: mode.force,
        provenance: !a.no_provenance,
    };
    let recorder = recorder.as_ref();
    let resolver = run.resolver.clone();
    let status = super::common::runtime()?.block_on(async {
        let selected = selection.resolve(&run.reg, &source, &run.patches).await?;
        let jobs = selection.jobs(selected, &source, &target);
        let finished = apply_all(run, jobs, opts, recorder, a.jobs).await;
        report(&source, finished, a, &mode, recorder, &map_patch)
    })?;
    Ok((status, resolver))
}

/// Prints what each image came to (after the map is complete on disk, so a reader that goes
/// away cannot cost the record) and writes statements.
fn report(
    source: &Repo,
    finished: Vec<(Job, Result<Applied, runner_patch::apply::Error>)>,
    a: &ImageArgs,
    mode: &Mode<'_>,
    recorder: Option<&Recorder>,
    map_patch: &str,
) -> Result<Status> {
    let (mut records, mut rows, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    let mut status = Status::Success;
    for (job, result) in &finished {
        let name = format!("{source}:{}", job.tag);
        let written = match (result, mode.provenance_dir) {
            (Ok(done), Some(dir)) => done.write_statements(dir).map_err(anyhow::Error::from),
            (Ok(_), None) => Ok(()),
            (Err(e), _) => Err(anyhow!("{e:#}")),
        };
        if let Err(e) = written {
            status = Status::Error;
            eprintln!("runner-patch: error: {name}: {e:#}");
            errors.push((name.clone(), format!("{e:#}")));
        }
        match result {
            Ok(done) => {
                if done.plan.outcome == Outcome::Refused && status == Status::Success {
                    status = Status::Refused;
                }
                rows.push(done.record.text());
                records.push(done.record.clone());
            }
            Err(_) => rows.push(format!("{name}\n  {:<16} see the error above", "error")),
        }
    }
    if let Some(r) = recorder {
        r.conclude(&records.iter().map(|r| r.target.clone()).collect::<Vec<_>>())?;
    } else if mode.dry_run {
        tracing::info!("dry run: nothing pushed, no digest map written");
    }
    let map = DigestMap::new(map_patch, records);
    if !mode.report {
        return Ok(status);
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
