//! Independent checks of a patched image, from what the registry serves now: the file the
//! container sees has the patched shape, no stale bytecode is visible, every original layer is
//! there unchanged and in order, and the config differs from the original only by the appended
//! diff_id, history entry and label. Nothing here trusts how the image was made.

use std::io::Read;

use anyhow::{anyhow, Result};
use serde_json::Value;

use crate::digest::HashingReader;
use crate::media::{self, Descriptor, Document, Family, Kind};
use crate::patch::{Decision, PatchSpec};
use crate::plan::{pycs_of, scan_down};
use crate::registry::{Registry, Repo};
use crate::rewrite::{ORIGINAL_LABEL, PATCH_LABEL};
use crate::scan::{self, EntryKind, Wanted};

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

/// Reads the added layer (small) whole, verified, and lists its entries.
struct AddedLayer {
    diff_id: String,
    target: Option<(String, Vec<u8>)>,
    /// Entries that are neither the target nor whiteouts.
    others: Vec<String>,
}

async fn read_added(
    reg: &Registry,
    repo: &Repo,
    desc: &Descriptor,
    wanted: &Wanted,
) -> Result<AddedLayer> {
    let blob = reg.blob_get_small(repo, desc, 16 * 1024 * 1024).await?;
    let mut gz = HashingReader::new(flate2::read::MultiGzDecoder::new(&blob[..]));
    let mut target = None;
    let mut others = Vec::new();
    {
        let mut ar = tar::Archive::new(&mut gz);
        for e in ar.entries()? {
            let mut e = e?;
            let path = scan::normalize(&e.path()?.to_string_lossy());
            let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
            if name.starts_with(".wh.") {
                continue;
            } else if scan::has_suffix(&path, &wanted.target) && e.header().entry_type().is_file() {
                let mut c = Vec::new();
                e.read_to_end(&mut c)?;
                target = Some((path, c));
            } else {
                others.push(path);
            }
        }
    }
    let (diff_id, _) = gz.finish()?;
    Ok(AddedLayer {
        diff_id,
        target,
        others,
    })
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

/// Verifies one platform manifest of `repo`; `original` is the manifest it was made from (and
/// the repository holding it), when a digest map says so.
pub async fn verify_platform(
    reg: &Registry,
    spec: &PatchSpec,
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
    let family = match manifest.kind() {
        Some(Kind::Manifest(f)) => f,
        _ => {
            check.problems.push(format!(
                "{what} is not an image manifest ({})",
                manifest.media_type
            ));
            return Ok(check);
        }
    };
    let layers: Vec<Descriptor> = manifest
        .json
        .get("layers")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("manifest {what} has no layers"))?
        .iter()
        .enumerate()
        .map(|(i, l)| Descriptor::from_json(l, &format!("manifest {what} layers[{i}]")))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!(e))?;
    if layers.len() < 2 {
        check.problems.push(format!(
            "{what} has {} layer(s); a patched image has its original layers plus one",
            layers.len()
        ));
        return Ok(check);
    }
    let wanted = Wanted {
        target: spec.target.clone(),
        companions: Vec::new(),
        package: spec.package.clone(),
    };
    let added_desc = &layers[layers.len() - 1];
    if added_desc.media_type != family.layer_gzip() {
        problems.push(format!(
            "the last layer's media type {:?} is not the {} gzip layer type",
            added_desc.media_type,
            if family == Family::Docker {
                "Docker"
            } else {
                "OCI"
            }
        ));
    }
    let added = read_added(reg, repo, added_desc, &wanted).await?;
    if !added.others.is_empty() {
        problems.push(format!(
            "the patch layer holds unexpected entries: /{}",
            added.others.join(", /")
        ));
    }

    // Config: the appended diff_id, history entry and label.
    let cfg_desc = Descriptor::from_json(
        manifest.json.get("config").unwrap_or(&Value::Null),
        &format!("manifest {what} config"),
    )
    .map_err(|e| anyhow!(e))?;
    let config: Value = serde_json::from_slice(
        &reg.blob_get_small(repo, &cfg_desc, media::CONFIG_MAX_BYTES)
            .await?,
    )?;
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
    if diff_ids.last().and_then(Value::as_str) != Some(added.diff_id.as_str()) {
        problems.push(format!(
            "the config's last diff_id is not the patch layer's ({})",
            added.diff_id
        ));
    }
    let created_by = format!("runner-patch: {}", spec.id);
    let history = config["history"].as_array().cloned().unwrap_or_default();
    if history
        .last()
        .and_then(|h| h.get("created_by"))
        .and_then(Value::as_str)
        != Some(created_by.as_str())
    {
        problems.push(format!(
            "the config's last history entry is not \"{created_by}\""
        ));
    }
    let label = config["config"]["Labels"][PATCH_LABEL]
        .as_str()
        .unwrap_or_default();
    if !label.split(',').any(|p| p == spec.id) {
        problems.push(format!("label {PATCH_LABEL} does not name {}", spec.id));
    }

    // Against the original: same layers in the same order, config equal but for the appendix.
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
        if nl.len() != ol.len() + 1 {
            problems.push(format!(
                "{} layers, but the original has {} (+1 expected)",
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
        let ocd = Descriptor::from_json(
            orig.json.get("config").unwrap_or(&Value::Null),
            "original config",
        )
        .map_err(|e| anyhow!(e))?;
        let mut expect: Value = serde_json::from_slice(
            &reg.blob_get_small(orig_repo, &ocd, media::CONFIG_MAX_BYTES)
                .await?,
        )?;
        if let Some(d) = expect["rootfs"]["diff_ids"].as_array_mut() {
            d.push(Value::String(added.diff_id.clone()));
        }
        if let (Some(h), Some(last)) = (expect["history"].as_array_mut(), history.last()) {
            h.push(last.clone());
        }
        if expect["config"]["Labels"].is_null() {
            expect["config"]["Labels"] = Value::Object(Default::default());
        }
        expect["config"]["Labels"][PATCH_LABEL] = Value::String(label.to_owned());
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

    // What the container sees: the top-most copy, and no visible stale bytecode beneath it.
    // A shadowed copy (an upper symlink, file or whiteout at an ancestor) is named by the
    // refusal or by what hides it.
    let scanned = scan_down(reg, repo, &layers, &wanted, 2, &check.platform).await?;
    if let Some(why) = &scanned.refusal {
        problems.push(why.clone());
    }
    match scanned.hits.first() {
        None if scanned.refusal.is_some() => {}
        None => problems.push(scanned.nothing_visible(&spec.target)),
        Some((index, entries)) => {
            let entry = &entries[entries.len() - 1];
            check.file = Some(format!("/{}", entry.path));
            check.seen.file = check.file.clone();
            if *index == layers.len() - 1 {
                check.seen.patched_file = Some(crate::digest::sha256(&entry.content));
            }
            check.seen.original_file = scanned
                .hits
                .get(1)
                .and_then(|(_, lower)| lower.iter().rev().find(|l| l.path == entry.path))
                .filter(|l| l.kind == EntryKind::Regular)
                .map(|l| crate::digest::sha256(&l.content));
            if *index != layers.len() - 1 {
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
            if let Some((_, lower)) = scanned.hits.get(1) {
                if let Some(l) = lower.iter().find(|l| l.path != entry.path) {
                    problems.push(format!(
                        "a lower layer holds another copy at /{}, which the patch does not cover",
                        l.path
                    ));
                }
            }
            for p in pycs_of(&scanned.pycs, &entry.path) {
                problems.push(format!("stale bytecode /{p} is visible"));
            }
        }
    }
    if added.target.is_none() {
        problems.push(format!(
            "the last layer holds no {}",
            spec.target_file_name()
        ));
    }
    check.problems = problems;
    Ok(check)
}
