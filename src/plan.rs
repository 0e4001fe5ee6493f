//! The plan of one image: for every platform, what the container sees, what the patch decided,
//! and the new layer, config and manifest it needs; then the new index. Computed without writing
//! anything, so `--dry-run` shows exactly what `apply` pushes.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use tokio_util::io::SyncIoBridge;

use crate::layer::{self, NewLayer};
use crate::media::{self, layer_compression, platform_of, Descriptor, Document, Kind};
use crate::patch::{Decision, Outcome, PatchSpec};
use crate::registry::{Registry, Repo};
use crate::rewrite;
use crate::scan::{self, EntryKind, FileEntry, Overlay, Wanted};

/// The new objects of one patched platform, ready to push.
#[derive(Debug, Clone)]
pub struct NewImage {
    pub layer: NewLayer,
    pub config: Vec<u8>,
    pub config_digest: String,
    pub manifest: Document,
}

/// One platform of an image.
#[derive(Debug, Clone)]
pub struct PlatformPlan {
    pub platform: String,
    pub original: Document,
    pub outcome: Outcome,
    pub reason: String,
    pub file: Option<String>,
    pub version: Option<String>,
    pub shape: Option<String>,
    pub layers_scanned: usize,
    pub bytes_scanned: u64,
    pub new: Option<NewImage>,
}

/// One tag of the source and where its patched image goes.
#[derive(Debug, Clone)]
pub struct ImagePlan {
    pub source: Repo,
    pub tag: String,
    pub target: Repo,
    pub target_tag: String,
    pub original: Document,
    pub platforms: Vec<PlatformPlan>,
    /// The new index (or the new manifest for a single-manifest tag) when anything is patched.
    pub new_top: Option<Document>,
    /// Attestation children left out of the new index.
    pub dropped: Vec<String>,
    pub outcome: Outcome,
    pub reason: String,
}

/// What the layer scan found for one platform.
struct Found {
    entry: FileEntry,
    pycs: Vec<String>,
    files: std::collections::BTreeMap<String, Vec<u8>>,
    layers_scanned: usize,
    bytes_scanned: u64,
}

/// Plans one tag: resolves it, scans each platform (concurrently) and builds what is new.
pub async fn plan_image(
    reg: Arc<Registry>,
    spec: Arc<PatchSpec>,
    source: &Repo,
    tag: &str,
    target: &Repo,
    target_tag: &str,
) -> Result<ImagePlan> {
    let top = reg.manifest_get(&source.at_tag(tag)).await?;
    let src = format!("{source}:{tag}");
    let kind = top.kind().ok_or_else(|| {
        anyhow!(
            "{src} has media type {:?}, which is neither a manifest nor an index",
            top.media_type
        )
    })?;
    let mut platforms = Vec::new();
    let mut dropped = Vec::new();
    match kind {
        Kind::Index(_) => {
            let entries = top
                .json
                .get("manifests")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if entries.is_empty() {
                bail!("index {src} lists no manifests");
            }
            let mut jobs = Vec::new();
            for (i, entry) in entries.iter().enumerate() {
                let desc = Descriptor::from_json(entry, &format!("index {src} manifests[{i}]"))
                    .map_err(|e| anyhow!(e))?;
                if media::is_attestation(entry) {
                    dropped.push(desc.digest);
                    continue;
                }
                let platform = platform_of(entry).unwrap_or_else(|| format!("manifests[{i}]"));
                let (reg, spec, source) = (reg.clone(), spec.clone(), source.clone());
                jobs.push(tokio::spawn(async move {
                    let child = reg.manifest_get(&source.at_digest(&desc.digest)).await?;
                    if !matches!(child.kind(), Some(Kind::Manifest(_))) {
                        bail!(
                            "{platform} child {} of {source} is {:?}, not an image manifest",
                            desc.digest,
                            child.media_type
                        );
                    }
                    plan_platform(&reg, &spec, &source, platform, child).await
                }));
            }
            for job in jobs {
                platforms.push(job.await.context("platform task failed")??);
            }
        }
        Kind::Manifest(_) => {
            platforms.push(plan_platform(&reg, &spec, source, String::new(), top.clone()).await?);
        }
    }

    let refused: Vec<&PlatformPlan> = platforms
        .iter()
        .filter(|p| p.outcome == Outcome::Refused)
        .collect();
    let (outcome, reason) = if let Some(first) = refused.first() {
        (
            Outcome::Refused,
            format!("{}: {}", first.platform, first.reason),
        )
    } else {
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
    };

    let new_top = if outcome == Outcome::Patched {
        match kind {
            Kind::Index(_) => {
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
                let (doc, _) = rewrite::index_replace(&top, &replaced).map_err(|e| anyhow!(e))?;
                Some(doc)
            }
            Kind::Manifest(_) => platforms
                .first()
                .and_then(|p| p.new.as_ref())
                .map(|n| n.manifest.clone()),
        }
    } else {
        None
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
        outcome,
        reason,
    })
}

fn refused(
    platform: String,
    original: Document,
    reason: String,
    found: Option<&Found>,
) -> PlatformPlan {
    PlatformPlan {
        platform,
        original,
        outcome: Outcome::Refused,
        reason,
        file: found.map(|f| format!("/{}", f.entry.path)),
        version: None,
        shape: None,
        layers_scanned: found.map_or(0, |f| f.layers_scanned),
        bytes_scanned: found.map_or(0, |f| f.bytes_scanned),
        new: None,
    }
}

/// Plans one platform manifest.
async fn plan_platform(
    reg: &Registry,
    spec: &PatchSpec,
    repo: &Repo,
    platform: String,
    manifest: Document,
) -> Result<PlatformPlan> {
    let what = format!("{repo}@{}", manifest.digest);
    let family = match manifest.kind() {
        Some(Kind::Manifest(f)) => f,
        _ => bail!("{what} is not an image manifest"),
    };
    let cfg_desc = Descriptor::from_json(
        manifest.json.get("config").unwrap_or(&Value::Null),
        &format!("manifest {what} config"),
    )
    .map_err(|e| anyhow!(e))?;
    let layers: Vec<Descriptor> = manifest
        .json
        .get("layers")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("manifest {what} has no layers list"))?
        .iter()
        .enumerate()
        .map(|(i, l)| Descriptor::from_json(l, &format!("manifest {what} layers[{i}]")))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!(e))?;
    let config = reg
        .blob_get_small(repo, &cfg_desc, media::CONFIG_MAX_BYTES)
        .await?;
    let platform = if platform.is_empty() {
        let c: Value = serde_json::from_slice(&config)
            .with_context(|| format!("config {} of {what} is not JSON", cfg_desc.digest))?;
        let os = c.get("os").and_then(Value::as_str).unwrap_or("unknown");
        let arch = c
            .get("architecture")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        match c.get("variant").and_then(Value::as_str) {
            Some(v) => format!("{os}/{arch}/{v}"),
            None => format!("{os}/{arch}"),
        }
    } else {
        platform
    };

    let wanted = Wanted {
        target: spec.target.clone(),
        companions: spec.guards.iter().map(|g| g.target.clone()).collect(),
        package: spec.package.clone(),
    };
    let found = match find(reg, repo, &layers, &wanted).await? {
        Ok(f) => f,
        Err((reason, layers_scanned, bytes_scanned)) => {
            let mut p = refused(platform, manifest, reason, None);
            p.layers_scanned = layers_scanned;
            p.bytes_scanned = bytes_scanned;
            return Ok(p);
        }
    };
    let file = format!("/{}", found.entry.path);
    match &found.entry.kind {
        EntryKind::Regular => {}
        EntryKind::Symlink(to) => {
            return Ok(refused(
                platform,
                manifest,
                format!("{file} is a symbolic link to {to:?}; links are refused, not followed"),
                Some(&found),
            ))
        }
        EntryKind::Hardlink(to) => {
            return Ok(refused(
                platform,
                manifest,
                format!("{file} is a hard link to {to:?}; links are refused, not followed"),
                Some(&found),
            ))
        }
        EntryKind::Other(k) => {
            return Ok(refused(
                platform,
                manifest,
                format!("{file} is a {k} entry, not a regular file"),
                Some(&found),
            ))
        }
    }
    let version = version_of(spec, &found);
    let decision = spec.decide(&found.entry.content);
    let mut plan = PlatformPlan {
        platform,
        original: manifest.clone(),
        outcome: decision.outcome(),
        reason: String::new(),
        file: Some(file.clone()),
        version,
        shape: None,
        layers_scanned: found.layers_scanned,
        bytes_scanned: found.bytes_scanned,
        new: None,
    };
    match decision {
        Decision::AlreadyPatched => {
            plan.reason = format!("{file} already carries patch {}", spec.id)
        }
        Decision::NotAffected { reason } => plan.reason = format!("{file}: {reason}"),
        Decision::Refused { reason } => plan.reason = format!("{file}: {reason}"),
        Decision::Patched { shape, bytes } => {
            for guard in &spec.guards {
                let hit = found
                    .files
                    .iter()
                    .find(|(p, _)| scan::has_suffix(p, &guard.target));
                if let Some((gpath, content)) = hit {
                    if let Some(why) = spec.check_guard(guard, content) {
                        plan.outcome = Outcome::Refused;
                        plan.reason = format!("/{gpath}: {why}");
                        return Ok(plan);
                    }
                }
            }
            let mtime = layer::new_mtime(
                layer::parse_rfc3339(&spec.mtime).map_err(|e| anyhow!(e))?,
                &found.entry,
            );
            let new_layer = layer::build(
                &found.entry,
                &bytes,
                &found.pycs,
                mtime,
                family.layer_gzip(),
            )
            .with_context(|| format!("building the new layer for {what}"))?;
            let new_config = rewrite::config_append(
                &config,
                &cfg_desc.digest,
                &new_layer.diff_id,
                &spec.id,
                &spec.mtime,
                &spec.title,
                layers.len(),
            )
            .map_err(|e| anyhow!(e))?;
            let config_digest = crate::digest::sha256(&new_config);
            let new_manifest = rewrite::manifest_append(
                &manifest,
                &config_digest,
                new_config.len() as u64,
                &new_layer.media_type,
                &new_layer.digest,
                new_layer.bytes.len() as u64,
            )
            .map_err(|e| anyhow!(e))?;
            plan.reason = format!(
                "{file}: shape {shape} patched{}",
                if found.pycs.is_empty() {
                    String::new()
                } else {
                    format!(", {} stale .pyc hidden", found.pycs.len())
                }
            );
            plan.shape = Some(shape);
            plan.new = Some(NewImage {
                layer: new_layer,
                config: new_config,
                config_digest,
                manifest: new_manifest,
            });
        }
    }
    Ok(plan)
}

/// Scans layers from the top down until one holds the target; `Err((reason, ..))` when no
/// layer shows it. Registry and integrity failures are errors, not refusals.
async fn find(
    reg: &Registry,
    repo: &Repo,
    layers: &[Descriptor],
    wanted: &Wanted,
) -> Result<std::result::Result<Found, (String, usize, u64)>> {
    let mut overlay = Overlay::default();
    let mut pycs = std::collections::BTreeSet::new();
    let mut files = std::collections::BTreeMap::new();
    let mut bytes_scanned = 0;
    for (n, desc) in layers.iter().rev().enumerate() {
        let Some(compression) = layer_compression(&desc.media_type) else {
            return Ok(Err((
                format!(
                    "layer {} has media type {:?}, which this tool cannot read",
                    desc.digest, desc.media_type
                ),
                n,
                bytes_scanned,
            )));
        };
        let reader = reg.blob_reader(repo, desc).await?;
        let bridge = SyncIoBridge::new(reader);
        let (d, o, w) = (desc.clone(), overlay.clone(), wanted.clone());
        let layer =
            tokio::task::spawn_blocking(move || scan::scan_layer(bridge, &d, compression, &o, &w))
                .await
                .context("layer scan task failed")?
                .with_context(|| format!("reading {repo}"))?;
        bytes_scanned += layer.compressed_bytes;
        pycs.extend(layer.pycs.iter().cloned());
        for (p, c) in &layer.files {
            files.entry(p.clone()).or_insert_with(|| c.clone());
        }
        if !layer.targets.is_empty() {
            let mut paths: Vec<&str> = layer.targets.iter().map(|t| t.path.as_str()).collect();
            paths.dedup();
            if paths.len() > 1 {
                return Ok(Err((format!("layer {} holds {} copies of the target (/{}); refusing to guess which one runs", desc.digest, paths.len(), paths.join(", /")), n + 1, bytes_scanned)));
            }
            let entry = layer
                .targets
                .last()
                .cloned()
                .ok_or_else(|| anyhow!("no target"))?;
            let dir = entry
                .path
                .rsplit_once('/')
                .map_or("", |(d, _)| d)
                .to_owned();
            let pycs = pycs
                .into_iter()
                .filter(|p| p.starts_with(&format!("{dir}/__pycache__/")))
                .collect();
            return Ok(Ok(Found {
                entry,
                pycs,
                files,
                layers_scanned: n + 1,
                bytes_scanned,
            }));
        }
        overlay.absorb(&layer);
    }
    Ok(Err((
        format!("no layer holds a visible **/{}", wanted.target),
        layers.len(),
        bytes_scanned,
    )))
}

/// The package version: the dist-info beside the package, else its `_version.py`, else any
/// dist-info of that package that the scan saw.
fn version_of(spec: &PatchSpec, found: &Found) -> Option<String> {
    let path = &found.entry.path;
    let root = path
        .strip_suffix(&spec.target)
        .map(|p| format!("{p}{}", spec.package))?;
    let parent = root
        .rsplit_once('/')
        .map_or(String::new(), |(p, _)| p.to_owned());
    let meta_prefix = if parent.is_empty() {
        format!("{}-", spec.package)
    } else {
        format!("{parent}/{}-", spec.package)
    };
    let pick = |pred: &dyn Fn(&str) -> bool| {
        found
            .files
            .iter()
            .find(|(p, _)| pred(p))
            .and_then(|(p, c)| scan::version_from_file(p, c))
    };
    pick(&|p| p.starts_with(&meta_prefix) && p.ends_with(".dist-info/METADATA"))
        .or_else(|| pick(&|p| p == format!("{root}/_version.py")))
        .or_else(|| pick(&|p| p.ends_with(".dist-info/METADATA")))
}
