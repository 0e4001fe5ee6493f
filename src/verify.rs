//! Independent checks of a patched image, from what the registry serves now: the file the
//! container sees has the patched shape, no stale bytecode is visible, every original layer is
//! there unchanged and in order, and the config differs from the original only by the appended
//! diff_id, history entry and label. Nothing here trusts how the image was made.

use anyhow::{anyhow, Result};
use serde_json::Value;

use crate::digest::HashingReader;
use crate::image;
use crate::media::{self, Descriptor, Document, Family, Kind};
use crate::patch::{Decision, Patch, Verdict};
use crate::registry::{Registry, Repo};
use crate::rewrite::{ORIGINAL_LABEL, PATCH_LABEL};
use crate::scan::{self, EntryKind};
use crate::view::{pycs_of, Layers, ScanView, Search};

/// The outcome for one platform: what was found wrong (empty when it verifies).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlatformCheck {
    pub platform: String,
    pub digest: String,
    pub file: Option<String>,
    pub problems: Vec<String>,
    /// Where the image came from, as its provenance statements say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub made_from: Vec<String>,
    /// The file's digests as read here, for checking a provenance statement against them.
    #[serde(skip)]
    pub seen: crate::provenance::Seen,
}

/// An added layer (small) read whole, verified, with its entries.
struct AddedLayer {
    diff_id: String,
    /// Paths of entries that are not whiteouts.
    files: Vec<String>,
}

async fn read_added(reg: &Registry, repo: &Repo, desc: &Descriptor) -> Result<AddedLayer> {
    let blob = reg.blob_get_small(repo, desc, 16 * 1024 * 1024).await?;
    let mut gz = HashingReader::new(flate2::read::MultiGzDecoder::new(&blob[..]));
    let mut files = Vec::new();
    {
        let mut ar = tar::Archive::new(&mut gz);
        for e in ar.entries()? {
            let mut e = e?;
            let path = scan::normalize(&e.path()?.to_string_lossy());
            let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
            if !name.starts_with(".wh.") {
                files.push(path);
            }
            std::io::copy(&mut e, &mut std::io::sink())?;
        }
    }
    let (diff_id, _) = gz.finish()?;
    Ok(AddedLayer { diff_id, files })
}

/// Whether a history entry was written by this tool (a layer, or an `env` edit): its patch
/// id and whether it is `empty_layer`.
fn ours(h: &Value) -> Option<(&str, bool)> {
    let by = h.get("created_by")?.as_str()?;
    let id = by.strip_prefix("runner-patch: ")?;
    let id = id.split(' ').next().unwrap_or(id);
    let empty = h.get("empty_layer").and_then(Value::as_bool) == Some(true);
    Some((id, empty))
}

/// The first JSON path where two values differ, for a readable problem.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                let p = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => {
                        if let Some(d) = first_difference(u, v, &p) {
                            return Some(d);
                        }
                    }
                    _ => return Some(p),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(format!("{path} (length {} vs {})", x.len(), y.len()));
            }
            x.iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (u, v))| first_difference(u, v, &format!("{path}[{i}]")))
        }
        _ => (a != b).then(|| path.to_owned()),
    }
}

/// What a verify run checks images against: the patches asked for (each must be on every
/// image), every patch it knows (to check the others a label names), and the run's layers.
pub struct Checks {
    pub requested: Vec<Patch>,
    pub known: Vec<Patch>,
    pub layers: Layers,
}

impl Checks {
    fn find(&self, id: &str) -> Option<&Patch> {
        self.requested
            .iter()
            .chain(&self.known)
            .find(|p| p.meta().id == id)
    }
}

/// Verifies one platform manifest of `repo`; `original` is the manifest it was made from (and
/// the repository holding it), when a digest map says so.
pub async fn verify_platform(
    reg: &Registry,
    checks: &Checks,
    repo: &Repo,
    platform: String,
    manifest: &Document,
    original: Option<(&Repo, &Document)>,
) -> Result<PlatformCheck> {
    let mut problems = Vec::new();
    let what = format!("{repo}@{}", manifest.digest);
    let mut check = PlatformCheck {
        platform,
        digest: manifest.digest.clone(),
        file: None,
        problems: Vec::new(),
        made_from: Vec::new(),
        seen: Default::default(),
    };
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
    } = image::Manifest::parse(manifest, &what).map_err(|e| anyhow!(e))?;
    let config: Value = serde_json::from_slice(
        &reg.blob_get_small(repo, &cfg_desc, media::CONFIG_MAX_BYTES)
            .await?,
    )?;

    // The patches the label names, in order; every patch asked for must be among them.
    let label = config["config"]["Labels"][PATCH_LABEL]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let named = crate::rewrite::patches_of(&config);
    for p in &checks.requested {
        if !named.iter().any(|n| *n == p.meta().id) {
            problems.push(format!("label {PATCH_LABEL} does not name {}", p.meta().id));
        }
    }
    let mut expected: Vec<&Patch> = Vec::new();
    for id in &named {
        match checks.find(id) {
            Some(p) => expected.push(p),
            None => problems.push(format!(
                "label {PATCH_LABEL} names patch {id}, which this run does not know (give it with --patch)"
            )),
        }
    }
    for p in &checks.requested {
        if !expected.iter().any(|e| e.meta().id == p.meta().id) {
            expected.push(p);
        }
    }

    // The history this tool appended, from the end: one entry per layer, `env` edits empty.
    let history = config["history"].as_array().cloned().unwrap_or_default();
    let tail: Vec<(String, bool)> = history
        .iter()
        .rev()
        .map_while(|h| ours(h).map(|(id, empty)| (id.to_owned(), empty)))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let last_id = named
        .last()
        .cloned()
        .or_else(|| checks.requested.last().map(|p| p.meta().id.clone()))
        .unwrap_or_default();
    if history.last().and_then(ours).is_none() {
        problems.push(format!(
            "the config's last history entry is not \"runner-patch: {last_id}\""
        ));
    }
    let layered: Vec<&String> = tail.iter().filter(|(_, e)| !*e).map(|(id, _)| id).collect();
    let added_count = layered.len().min(layers.len());
    let first_added = layers.len() - added_count;
    let wants_layer = expected.iter().any(|p| !matches!(p, Patch::Env(_)));
    if wants_layer && added_count == 0 {
        problems.push(format!(
            "{what} has no layer of this tool on top (its history ends without one)"
        ));
    }

    // Each added layer: the family's gzip type, only the files its patch writes, its diff_id.
    let diff_ids = config["rootfs"]["diff_ids"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if diff_ids.len() != layers.len() {
        problems.push(format!(
            "config lists {} diff_ids for {} layers",
            diff_ids.len(),
            layers.len()
        ));
    }
    let mut added_ids = Vec::new();
    let mut added_files: Vec<String> = Vec::new();
    for (n, desc) in layers[first_added..].iter().enumerate() {
        let id = layered[n];
        if desc.media_type != family.layer_gzip() {
            problems.push(format!(
                "the last layer's media type {:?} is not the {} gzip layer type",
                desc.media_type,
                if family == Family::Docker {
                    "Docker"
                } else {
                    "OCI"
                }
            ));
        }
        let added = read_added(reg, repo, desc).await?;
        let writes = checks
            .find(id)
            .map(|p| p.kind().writes())
            .unwrap_or_default();
        let stray: Vec<&String> = added
            .files
            .iter()
            .filter(|f| !writes.iter().any(|w| scan::has_suffix(f, w)))
            .collect();
        if !stray.is_empty() && checks.find(id).is_some() {
            problems.push(format!(
                "the patch layer holds unexpected entries: /{}",
                stray
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", /")
            ));
        }
        if let Some(Patch::Shapes(s)) = checks.find(id) {
            if !added
                .files
                .iter()
                .any(|f| scan::has_suffix(f, &s.spec.target))
            {
                problems.push(format!(
                    "the last layer holds no {}",
                    s.spec.target_file_name()
                ));
            }
        }
        if diff_ids.get(first_added + n).and_then(Value::as_str) != Some(added.diff_id.as_str()) {
            problems.push(format!(
                "the config's last diff_id is not the patch layer's ({})",
                added.diff_id
            ));
        }
        added_files.extend(added.files);
        added_ids.push(added.diff_id);
    }

    // Against the original: same layers in the same order, config equal but for what the
    // patches applied since it appended.
    if let Some((orig_repo, orig)) = original {
        if orig.media_type != manifest.media_type {
            problems.push(format!(
                "manifest media type {} differs from the original's {}",
                manifest.media_type, orig.media_type
            ));
        }
        let ol = orig
            .json
            .get("layers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let nl = manifest
            .json
            .get("layers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let ocd = Descriptor::from_json(
            orig.json.get("config").unwrap_or(&Value::Null),
            "original config",
        )
        .map_err(|e| anyhow!(e))?;
        let mut expect: Value = serde_json::from_slice(
            &reg.blob_get_small(orig_repo, &ocd, media::CONFIG_MAX_BYTES)
                .await?,
        )?;
        let before = crate::rewrite::patches_of(&expect);
        let new_ids: Vec<&String> = named.iter().filter(|n| !before.contains(n)).collect();
        let new_layers = new_ids
            .iter()
            .filter(|id| !matches!(checks.find(id), Some(Patch::Env(_))))
            .count()
            .max(usize::from(new_ids.is_empty() && wants_layer));
        if nl.len() != ol.len() + new_layers {
            problems.push(format!(
                "{} layers, but the original has {} (+{new_layers} expected)",
                nl.len(),
                ol.len()
            ));
        }
        if let Some(i) = ol.iter().zip(&nl).position(|(a, b)| a != b) {
            problems.push(format!(
                "layer {i} differs from the original's ({} instead of {})",
                nl[i]["digest"], ol[i]["digest"]
            ));
        }
        // Replay what the run added: each env edit as the patch makes it, each layer's
        // diff_id and history entry as the image holds them.
        let mut layer_entries = history
            .iter()
            .filter(|h| ours(h).is_some_and(|(_, empty)| !empty))
            .rev()
            .take(new_layers)
            .cloned()
            .collect::<Vec<_>>();
        layer_entries.reverse();
        let mut next_layer = added_ids.len().saturating_sub(new_layers);
        let mut entries = layer_entries.into_iter();
        for id in &new_ids {
            match checks.find(id) {
                Some(Patch::Env(e)) => match e.edit_config(&expect) {
                    Ok(Some(v)) => expect = v,
                    Ok(None) => {}
                    Err(why) => problems.push(format!("patch {id}: {why}")),
                },
                _ => {
                    if let (Some(d), Some(list)) = (
                        added_ids.get(next_layer),
                        expect["rootfs"]["diff_ids"].as_array_mut(),
                    ) {
                        list.push(Value::String(d.clone()));
                    }
                    next_layer += 1;
                    if let (Some(h), Some(list)) =
                        (entries.next(), expect["history"].as_array_mut())
                    {
                        list.push(h);
                    }
                }
            }
        }
        if expect["config"]["Labels"].is_null() {
            expect["config"]["Labels"] = Value::Object(Default::default());
        }
        expect["config"]["Labels"][PATCH_LABEL] = Value::String(label.clone());
        // A patched config names its original manifest (the first one, when patches stack);
        // a wrong value shows as a difference at that label.
        if config["config"]["Labels"].get(ORIGINAL_LABEL).is_some()
            && expect["config"]["Labels"].get(ORIGINAL_LABEL).is_none()
        {
            expect["config"]["Labels"][ORIGINAL_LABEL] = Value::String(orig.digest.clone());
        }
        if let Some(d) = first_difference(&expect, &config, "config") {
            problems.push(format!(
                "the config differs from the original beyond the patch at {d}"
            ));
        }
    }

    // Every layer is still served.
    for d in &layers {
        if !reg.blob_exists(repo, &d.digest).await? {
            problems.push(format!("layer {} is missing from {repo}", d.digest));
        }
    }

    // What the container sees: every patch the image names finds its work done there, and
    // no stale bytecode of a file written on top is visible.
    let search = Search::of(expected.iter().copied());
    let scanned = checks
        .layers
        .scan_down(reg, repo, &layers, &search, 2, &check.platform)
        .await?;
    if let Some(why) = &scanned.refusal {
        problems.push(why.clone());
    }
    for p in &expected {
        if let Patch::Shapes(s) = p {
            for one in s.spec.per_file() {
                let at = (first_added, layers.len());
                shapes_seen(&scanned, &one, at, &mut check, &mut problems);
            }
            continue;
        }
        if scanned.refusal.is_some() {
            continue;
        }
        let view = ScanView::new(&scanned, config.clone());
        match p.decide(&view) {
            Verdict::AlreadyPatched { .. } => {}
            other => problems.push(format!(
                "the image does not carry what patch {} makes ({}: {})",
                p.meta().id,
                other.outcome(),
                other.reason()
            )),
        }
    }
    if check.file.is_none() {
        check.file = added_files.first().map(|f| format!("/{f}"));
    }
    for f in &added_files {
        stale_bytecode(&scanned, f, &mut problems);
    }
    check.problems = problems;
    Ok(check)
}

/// The checks of a `shapes` patch on what the scan saw (as before stacking existed): the
/// top-most copy comes from an added layer, has the patched shape, has no other copy below it
/// that the patch does not cover, and no visible stale bytecode.
fn shapes_seen(
    scanned: &scan::Descent,
    spec: &crate::patch::PatchSpec,
    (first_added, layer_count): (usize, usize),
    check: &mut PlatformCheck,
    problems: &mut Vec<String>,
) {
    let hits: Vec<(usize, Vec<&scan::FileEntry>)> = scanned
        .hits
        .iter()
        .map(|(i, v)| {
            (
                *i,
                v.iter()
                    .filter(|e| scan::has_suffix(&e.path, &spec.target))
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
    match hits.first() {
        None if scanned.refusal.is_some() => {}
        None => problems.push(scanned.nothing_visible(&spec.target)),
        Some((index, entries)) => {
            let entry = entries[entries.len() - 1];
            check.file = Some(format!("/{}", entry.path));
            check.seen.file = check.file.clone();
            check.seen.by = Some(spec.id.clone());
            let on_top = *index >= first_added && *index < layer_count;
            if on_top {
                check.seen.patched_file = Some(crate::digest::sha256(&entry.content));
            }
            check.seen.original_file = hits
                .get(1)
                .and_then(|(_, lower)| lower.iter().rev().find(|l| l.path == entry.path))
                .filter(|l| l.kind == EntryKind::Regular)
                .map(|l| crate::digest::sha256(&l.content));
            if !on_top {
                problems.push(format!(
                    "the visible /{} comes from layer {index}, not from the patch layer",
                    entry.path
                ));
            }
            if entry.kind != EntryKind::Regular {
                problems.push(format!("the visible /{} is not a regular file", entry.path));
            } else {
                match spec.decide(&entry.content) {
                    Decision::AlreadyPatched => {}
                    Decision::Refused { reason } => problems.push(format!(
                        "the visible /{} is not the patched shape: {reason}",
                        entry.path
                    )),
                    other => problems.push(format!(
                        "the visible /{} is not the patched shape ({})",
                        entry.path,
                        other.outcome()
                    )),
                }
            }
            if let Some((_, lower)) = hits.get(1) {
                if let Some(l) = lower.iter().find(|l| l.path != entry.path) {
                    problems.push(format!(
                        "a lower layer holds another copy at /{}, which the patch does not cover",
                        l.path
                    ));
                }
            }
            stale_bytecode(scanned, &entry.path, problems);
        }
    }
}

/// Names each visible `.pyc` of the module at `path` (once, however many checks find it).
fn stale_bytecode(scanned: &scan::Descent, path: &str, problems: &mut Vec<String>) {
    for pyc in pycs_of(&scanned.pycs, path) {
        let problem = format!("stale bytecode /{pyc} is visible");
        if !problems.contains(&problem) {
            problems.push(problem);
        }
    }
}
