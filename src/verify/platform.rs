//! Independent checks of one patched platform, from what the registry serves now: each patch
//! the image names finds its work done in what the container sees, no stale bytecode is
//! visible, every original layer is there unchanged and in order, and the config differs from
//! the original only by what the patches appended. Nothing here trusts how the image was made.

use serde_json::Value;

use crate::image;
use crate::media::{self, Document, Kind};
use crate::patch::{Checked, Tree};
use crate::registry::Registry;
use crate::registry::Repo;
use crate::verify::added::{self, Added};
use crate::verify::original;
use crate::verify::subject::{Scope, Subject};
use crate::verify::types::{Checks, Error, PlatformCheck};
use crate::visible::{give_hashes, Search, Visible};

/// Verifies one platform manifest of `repo`; `original` is the manifest it was made from (and
/// the repository holding it), when a digest map says so; `scope` what else it says.
pub async fn verify_platform(
    reg: &Registry,
    checks: &Checks,
    repo: &Repo,
    platform: String,
    manifest: &Document,
    original: Option<(&Repo, &Document)>,
    scope: &Scope<'_>,
) -> Result<PlatformCheck, Error> {
    let mut check = PlatformCheck::new(platform, manifest.digest.clone());
    let what = format!("{repo}@{}", manifest.digest);
    if !matches!(manifest.kind(), Some(Kind::Manifest(_))) {
        check.problems.push(format!(
            "{what} is not an image manifest ({})",
            manifest.media_type
        ));
        return Ok(check);
    }
    let image::Manifest {
        family,
        config: cfg_desc,
        layers,
    } = image::Manifest::parse(manifest, &what)?;
    let bytes = reg
        .blob_get_small(repo, &cfg_desc, media::CONFIG_MAX_BYTES)
        .await?;
    let config: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::Invalid(format!("config {} of {what}: {e}", cfg_desc.digest)))?;
    let mut problems = Vec::new();
    let s = Subject::new(
        reg,
        checks,
        repo,
        manifest,
        family,
        layers,
        config,
        scope,
        &mut problems,
    );
    let added = added::check(&s, &mut problems).await?;
    if let Some(orig) = original {
        original::check(&s, orig, &added, &mut problems).await?;
    }
    // Every layer is still served.
    for d in &s.layers {
        if !reg.blob_exists(repo, &d.digest).await? {
            problems.push(format!("layer {} is missing from {repo}", d.digest));
        }
    }
    seen(&s, &added, &mut check, &mut problems).await?;
    check.problems = problems;
    Ok(check)
}

/// What the container sees: every patch the image names finds its work done there, and no
/// stale bytecode of a file written on top is visible.
async fn seen(
    s: &Subject<'_>,
    added: &Added,
    check: &mut PlatformCheck,
    problems: &mut Vec<String>,
) -> Result<(), Error> {
    let search = Search::of(s.expected.iter().copied());
    let scanned = s
        .checks
        .layers
        .scan_down(s.reg, s.repo, &s.layers, &search, 2, &check.platform)
        .await?;
    if let Some(why) = &scanned.refusal {
        problems.push(why.clone());
    }
    let mut tree =
        Visible::new(&scanned, s.config.clone()).with_added(s.first_added..s.layers.len());
    let mut resolved = Vec::with_capacity(s.expected.len());
    let label = format!("{} {}", s.repo, check.platform);
    for p in &s.expected {
        resolved.push(s.checks.resolver.patch_for(p, &tree, &label).await);
    }
    let expected = resolved.iter();
    let layers = &s.checks.layers;
    give_hashes(
        layers,
        s.reg,
        s.repo,
        &s.layers,
        expected,
        &mut tree,
        &check.platform,
    )
    .await?;
    for p in &resolved {
        let Checked {
            problems: found,
            file,
            seen,
        } = p.kind().check(&tree);
        for problem in found {
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
        if file.is_some() {
            check.file = file;
            check.seen = seen;
        }
    }
    if check.file.is_none() {
        check.file = added.files.first().map(|f| format!("/{f}"));
    }
    for f in &added.files {
        for pyc in tree.stale_bytecode(f) {
            let problem = format!("stale bytecode /{pyc} is visible");
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
    }
    Ok(())
}
