//! The plan of one image: for every platform, what the container sees, what the patch decided,
//! and the new layer, config and manifest it needs; then the new index. Computed without writing
//! anything, so `--dry-run` shows exactly what `apply` pushes.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::io::SyncIoBridge;

use crate::layer::{self, NewLayer};
use crate::media::{self, layer_compression, platform_of, Descriptor, Document, Kind};
use crate::patch::{Decision, Outcome, PatchSpec};
use crate::registry::{Registry, Repo};
use crate::rewrite;
use crate::scan::{self, Budget, Descent, EntryKind, FileEntry, LayerScan, Wanted};

/// The new objects of one patched platform, ready to push.
#[derive(Debug, Clone)]
pub struct NewImage {
    pub layer: NewLayer,
    pub config: Vec<u8>,
    pub config_digest: String,
    pub manifest: Document,
    /// sha256 of the file before and after the patch, for the provenance statement.
    pub file_digests: (String, String),
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
    /// For a platform that already carries a patch: the original manifest digest its config
    /// label names, so a re-run knows the original even without the digest map.
    pub recorded_original: Option<String>,
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
    /// Per-platform companion tags (`<tag>-linux-amd64`) that point at a child of this image.
    pub companions: Vec<Companion>,
    pub outcome: Outcome,
    pub reason: String,
    /// For an image that already carries a patch: the original digest it names itself (the
    /// OCI index annotation, or a single manifest's config label); `None` when it cannot tell.
    pub recorded_original: Option<String>,
}

impl ImagePlan {
    /// Bytes of everything new: layers, configs, manifests and the new index.
    pub fn bytes_to_push(&self) -> u64 {
        let platforms: u64 = self
            .platforms
            .iter()
            .filter_map(|p| p.new.as_ref())
            .map(|n| (n.layer.bytes.len() + n.config.len() + n.manifest.bytes.len()) as u64)
            .sum();
        let index = match (&self.new_top, self.original.kind()) {
            (Some(top), Some(Kind::Index(_))) => top.bytes.len() as u64,
            _ => 0,
        };
        platforms + index
    }
}

/// A per-platform companion tag of a multi-arch tag; it follows its child when that is patched.
#[derive(Debug, Clone)]
pub struct Companion {
    pub platform: String,
    pub source_tag: String,
    pub target_tag: String,
    /// What the companion tag pointed at when read (the original child, or something else).
    pub current: String,
    pub original_digest: String,
    /// The patched child it should point at, when this platform was patched.
    pub patched: Option<Document>,
}

/// `linux/arm64/v8` -> `linux-arm64`, the suffix the runner project's per-platform tags use.
pub fn companion_suffix(platform: &str) -> String {
    crate::tags::companion_suffix(platform)
}

/// What the layer scan found for one platform.
struct Found {
    entry: FileEntry,
    pycs: Vec<String>,
    files: std::collections::BTreeMap<String, Arc<Vec<u8>>>,
    layers_scanned: usize,
    bytes_scanned: u64,
}

/// Plans one tag: resolves it, scans each platform (concurrently, each holding one of the run's
/// `scans` permits, so an index with thousands of children opens at most that many scans) and
/// builds what is new.
pub async fn plan_image(
    reg: Arc<Registry>,
    spec: Arc<PatchSpec>,
    scans: Arc<Semaphore>,
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
            media::check_index_children(&top, &src).map_err(|e| anyhow!(e))?;
            let mut jobs = Vec::new();
            for (i, entry) in entries.iter().enumerate() {
                let desc = Descriptor::from_json(entry, &format!("index {src} manifests[{i}]"))
                    .map_err(|e| anyhow!(e))?;
                if media::is_attestation(entry) {
                    dropped.push(desc.digest);
                    continue;
                }
                let platform = platform_of(entry).unwrap_or_else(|| format!("manifests[{i}]"));
                let (reg, spec, source, tag, scans) = (
                    reg.clone(),
                    spec.clone(),
                    source.clone(),
                    tag.to_owned(),
                    scans.clone(),
                );
                jobs.push(tokio::spawn(async move {
                    let _permit = scans.acquire_owned().await?;
                    let child = reg.manifest_get(&source.at_digest(&desc.digest)).await?;
                    if !matches!(child.kind(), Some(Kind::Manifest(_))) {
                        bail!(
                            "{platform} child {} of {source} is {:?}, not an image manifest",
                            desc.digest,
                            child.media_type
                        );
                    }
                    plan_platform(&reg, &spec, &source, &tag, platform, child).await
                }));
            }
            for job in jobs {
                platforms.push(job.await.context("platform task failed")??);
            }
        }
        Kind::Manifest(_) => {
            let _permit = scans.acquire_owned().await?;
            platforms
                .push(plan_platform(&reg, &spec, source, tag, String::new(), top.clone()).await?);
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
                let doc =
                    rewrite::index_record_original(&doc, &top.digest).map_err(|e| anyhow!(e))?;
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

    let mut companions = Vec::new();
    if matches!(kind, Kind::Index(_)) {
        for p in &platforms {
            let suffix = companion_suffix(&p.platform);
            let source_tag = format!("{tag}-{suffix}");
            let target_companion = format!("{target_tag}-{suffix}");
            if let Some(current) = reg.manifest_digest(&source.at_tag(&source_tag)).await? {
                // A patched platform moves its companion from the original child to the new
                // one; an already patched one completes a companion a failed or killed run
                // left on the original child (known from the child's own label).
                let (original_digest, patched) = match (&p.new, p.outcome) {
                    (Some(n), _) => (p.original.digest.clone(), Some(n.manifest.clone())),
                    (None, Outcome::AlreadyPatched) => (
                        p.recorded_original
                            .clone()
                            .unwrap_or_else(|| p.original.digest.clone()),
                        Some(p.original.clone()),
                    ),
                    _ => (p.original.digest.clone(), None),
                };
                if patched.is_some() {
                    crate::tags::check(&target_companion)
                        .map_err(|e| anyhow!("companion of {src}: {e}"))?;
                }
                companions.push(Companion {
                    platform: p.platform.clone(),
                    source_tag,
                    target_tag: target_companion,
                    current,
                    original_digest,
                    patched,
                });
            }
        }
    }
    let recorded_original = if outcome == Outcome::AlreadyPatched {
        match kind {
            Kind::Index(_) => rewrite::index_recorded_original(&top),
            Kind::Manifest(_) => platforms.first().and_then(|p| p.recorded_original.clone()),
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
        companions,
        outcome,
        reason,
        recorded_original,
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
        recorded_original: None,
    }
}

/// Plans one platform manifest.
async fn plan_platform(
    reg: &Registry,
    spec: &PatchSpec,
    repo: &Repo,
    tag: &str,
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
    let label = format!("{tag} {platform}");
    let found = match find(reg, repo, &layers, &wanted, &label).await? {
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
        recorded_original: None,
    };
    match decision {
        Decision::AlreadyPatched => {
            plan.reason = format!("{file} already carries patch {}", spec.id);
            plan.recorded_original = rewrite::recorded_original(&config);
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
                &manifest.digest,
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
            .and_then(|m| rewrite::annotate_base(&m, &format!("{repo}:{tag}"), &manifest.digest))
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
                file_digests: (
                    crate::digest::sha256(&found.entry.content),
                    crate::digest::sha256(&bytes),
                ),
            });
        }
    }
    Ok(plan)
}

/// Reads layers from the top down, with overlay semantics ([`scan::Descent`]), until
/// `hits_needed` layers holding a visible target have been read, a layer or the overlay refuses
/// the image, or the bottom. Registry and integrity failures are errors.
pub async fn scan_down(
    reg: &Registry,
    repo: &Repo,
    layers: &[Descriptor],
    wanted: &Wanted,
    hits_needed: usize,
    label: &str,
) -> Result<Descent> {
    let mut descent = Descent::default();
    for (index, desc) in layers.iter().enumerate().rev() {
        let Some(compression) = layer_compression(&desc.media_type) else {
            descent.refuse(format!(
                "layer {} has media type {:?}, which this tool cannot read",
                desc.digest, desc.media_type
            ));
            break;
        };
        let layer = layer_scan(reg, repo, desc, compression, wanted, label).await?;
        if descent.push(index, layer, hits_needed) {
            break;
        }
    }
    Ok(descent)
}

/// Scans of layers already read in this run, by digest and what was looked for: platforms and
/// tags that share a layer read it once (a platform arriving while another reads it waits).
type ScanCell = Arc<tokio::sync::OnceCell<Arc<LayerScan>>>;
static LAYER_SCANS: std::sync::OnceLock<std::sync::Mutex<HashMap<(String, String), ScanCell>>> =
    std::sync::OnceLock::new();
/// What the cached layer scans of this run keep in memory together.
static KEPT_BY_RUN: Budget = Budget::new(scan::MAX_KEPT_PER_RUN);

/// One layer's scan, from this run's cache or read now.
async fn layer_scan(
    reg: &Registry,
    repo: &Repo,
    desc: &Descriptor,
    compression: media::Compression,
    wanted: &Wanted,
    label: &str,
) -> Result<Arc<LayerScan>> {
    let key = (
        desc.digest.clone(),
        format!(
            "{}|{}|{}",
            wanted.target,
            wanted.package,
            wanted.companions.join(",")
        ),
    );
    let cell = {
        let mut map = LAYER_SCANS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.entry(key).or_default().clone()
    };
    let mut fresh = false;
    let scan = cell
        .get_or_try_init(|| async {
            fresh = true;
            // A cached scan holds its kept bytes like a fresh one: charged to the run, and
            // read afresh (to be refused as such) when the run's budget cannot hold it.
            if let Some(hit) = crate::scan_cache::load(desc, compression, wanted)
                .filter(|h| KEPT_BY_RUN.take(h.kept).is_ok())
            {
                return Ok(Arc::new(hit));
            }
            let reader = reg.blob_reader(repo, desc).await?;
            let short = desc.digest.get(7..19).unwrap_or(&desc.digest);
            let bar = crate::report::bar(format!("{label} {short}"), desc.size);
            let bridge = crate::report::ProgressReader::new(SyncIoBridge::new(reader), bar);
            let (d, w) = (desc.clone(), wanted.clone());
            let layer = tokio::task::spawn_blocking(move || {
                scan::scan_layer(bridge, &d, compression, &w, &KEPT_BY_RUN)
            })
            .await
            .context("layer scan task failed")?
            .with_context(|| format!("reading {repo}"))?;
            tracing::debug!(
                "{label}: read layer {} ({} bytes)",
                desc.digest,
                layer.compressed_bytes
            );
            crate::scan_cache::store(desc, compression, wanted, &layer);
            Ok::<_, anyhow::Error>(Arc::new(layer))
        })
        .await?
        .clone();
    if !fresh {
        tracing::debug!("{label}: layer {} already read in this run", desc.digest);
    }
    Ok(scan)
}

/// Keeps the visible `.pyc` files that belong to the module at `path`.
pub fn pycs_of(pycs: &std::collections::BTreeSet<String>, path: &str) -> Vec<String> {
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    let prefix = format!("{dir}/__pycache__/");
    pycs.iter()
        .filter(|p| p.starts_with(&prefix))
        .cloned()
        .collect()
}

/// The single layer that decides what the container sees; `Err((reason, ..))` when none does
/// or it is ambiguous.
async fn find(
    reg: &Registry,
    repo: &Repo,
    layers: &[Descriptor],
    wanted: &Wanted,
    label: &str,
) -> Result<std::result::Result<Found, (String, usize, u64)>> {
    let s = scan_down(reg, repo, layers, wanted, 1, label).await?;
    if let Some(why) = s.refusal {
        return Ok(Err((why, s.layers_scanned, s.bytes_scanned)));
    }
    let nothing = s.nothing_visible(&wanted.target);
    let Some((index, targets)) = s.hits.into_iter().next() else {
        return Ok(Err((nothing, s.layers_scanned, s.bytes_scanned)));
    };
    let mut paths: Vec<&str> = targets.iter().map(|t| t.path.as_str()).collect();
    paths.dedup();
    if paths.len() > 1 {
        // A few are named: a hostile layer may hold thousands.
        let more = match paths.len() {
            n if n > 3 => format!(", and {} more", n - 3),
            _ => String::new(),
        };
        return Ok(Err((
            format!(
                "layer {} holds {} copies of the target (/{}{more}); refusing to guess which one runs",
                layers[index].digest,
                paths.len(),
                paths[..paths.len().min(3)].join(", /")
            ),
            s.layers_scanned,
            s.bytes_scanned,
        )));
    }
    let entry = targets
        .last()
        .cloned()
        .ok_or_else(|| anyhow!("no target"))?;
    let pycs = pycs_of(&s.pycs, &entry.path);
    Ok(Ok(Found {
        entry,
        pycs,
        files: s.files,
        layers_scanned: s.layers_scanned,
        bytes_scanned: s.bytes_scanned,
    }))
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
