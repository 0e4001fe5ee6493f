//! One platform of an image: each patch decides in turn on what the ones before it left, one
//! layer per file patch, then the new config and manifest.

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use super::{FileChange, NewImage, PatchStep, PlatformPlan, Run};
use crate::image;
use crate::layer::{self, NewLayer};
use crate::media::{self, Document};
use crate::patch::{Change, ImageView, Outcome, Patch, Verdict};
use crate::registry::Repo;
use crate::rewrite;
use crate::view::{ScanView, Search};

fn refused(platform: String, original: Document, reason: String) -> PlatformPlan {
    PlatformPlan {
        platform,
        original,
        outcome: Outcome::Refused,
        reason,
        file: None,
        version: None,
        shape: None,
        layers_scanned: 0,
        bytes_scanned: 0,
        new: None,
        patches: Vec::new(),
        recorded_original: None,
    }
}

/// A patched file's whiteouts for its compiled bytecode, wherever it lies below: the names
/// the scan saw and every name the interpreter could use ([`layer::bytecode_whiteouts`]).
fn with_bytecode_whiteouts(changes: &[Change]) -> Vec<Change> {
    let mut out = changes.to_vec();
    for c in changes {
        for w in layer::bytecode_whiteouts(c.path()) {
            if !out.iter().any(|o| o.path() == w) {
                out.push(Change::Whiteout(w));
            }
        }
    }
    out
}

/// The platform name of a single-manifest tag, from its config.
fn platform_from_config(config: &Value) -> String {
    let os = config
        .get("os")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let arch = config
        .get("architecture")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    match config.get("variant").and_then(Value::as_str) {
        Some(v) => format!("{os}/{arch}/{v}"),
        None => format!("{os}/{arch}"),
    }
}

/// Plans one platform manifest: scans for what the patches read, lets each patch decide in
/// turn on the view the previous ones left, and builds one layer per file patch (a config
/// edit for an `env` patch), then the new config and manifest.
pub(super) async fn plan_platform(
    run: &Run,
    repo: &Repo,
    tag: &str,
    platform: String,
    manifest: Document,
) -> Result<PlatformPlan> {
    let reg = &run.reg;
    let what = format!("{repo}@{}", manifest.digest);
    let image::Manifest {
        family,
        config: cfg_desc,
        layers,
    } = image::Manifest::parse(&manifest, &what).map_err(|e| anyhow!(e))?;
    let config = reg
        .blob_get_small(repo, &cfg_desc, media::CONFIG_MAX_BYTES)
        .await?;
    let config_json: Value = serde_json::from_slice(&config)
        .with_context(|| format!("config {} of {what} is not JSON", cfg_desc.digest))?;
    let platform = if platform.is_empty() {
        platform_from_config(&config_json)
    } else {
        platform
    };

    let chosen: Vec<&Patch> = run
        .patches
        .iter()
        .filter(|p| crate::tags::excludes(p, tag).is_none())
        .collect();
    let search = Search::of(chosen);
    let label = format!("{tag} {platform}");
    let descent = run
        .layers
        .scan_down(reg, repo, &layers, &search, 1, &label)
        .await?;
    if let Some(why) = &descent.refusal {
        let mut p = refused(platform, manifest, why.clone());
        p.layers_scanned = descent.layers_scanned;
        p.bytes_scanned = descent.bytes_scanned;
        return Ok(p);
    }

    let mut view = ScanView::new(&descent, config_json);
    let mut steps = Vec::new();
    let mut new_layers: Vec<NewLayer> = Vec::new();
    let mut cur_config = config.clone();
    let mut cur_manifest = manifest.clone();
    let mut file: Option<String> = None;
    let mut version: Option<String> = None;
    let mut shape: Option<String> = None;
    for patch in &run.patches {
        let meta = patch.meta();
        let mut step = PatchStep {
            id: meta.id.clone(),
            title: meta.title.clone(),
            definition_digest: meta.definition_digest.clone(),
            outcome: Outcome::NotAffected,
            reason: String::new(),
            layer: None,
            files: Vec::new(),
        };
        if let Some(why) = crate::tags::excludes(patch, tag) {
            step.reason = why;
            steps.push(step);
            continue;
        }
        if let Patch::Shapes(s) = patch {
            // The file the built-in kind is about, for the report and the map.
            if let Some(path) = view.find(&s.spec.target).first() {
                file.get_or_insert_with(|| format!("/{path}"));
                if version.is_none() {
                    let root = path
                        .strip_suffix(&s.spec.target)
                        .unwrap_or("")
                        .trim_end_matches('/');
                    version = view.package_version(root, &s.spec.package);
                }
            }
        }
        if let (None, Some(pkg)) = (&version, &meta.package) {
            // A diff patch's package: its version where its `__init__.py` is.
            let init = format!("{pkg}/__init__.py");
            if let Some(path) = view.find(&init).first() {
                let root = path.strip_suffix(&init).unwrap_or("").trim_end_matches('/');
                version = view.package_version(root, pkg);
            }
        }
        let verdict = patch.decide(&view);
        step.outcome = verdict.outcome();
        match verdict {
            Verdict::Patched {
                changes,
                config: edited,
                notes,
            } => {
                let hidden = changes
                    .iter()
                    .filter(|c| matches!(c, Change::Whiteout(_)))
                    .count();
                let mut reason = notes.join("; ");
                if let Some(s) = notes
                    .first()
                    .and_then(|n| n.split_once(": shape "))
                    .and_then(|(_, r)| r.strip_suffix(" patched"))
                {
                    shape.get_or_insert_with(|| s.to_owned());
                    if hidden > 0 {
                        reason.push_str(&format!(", {hidden} stale .pyc hidden"));
                    }
                }
                for c in &changes {
                    let before = view
                        .file(c.path())
                        .ok()
                        .flatten()
                        .map(|e| crate::digest::sha256(&e.content));
                    let after = match c {
                        Change::Write(e) => Some(crate::digest::sha256(&e.content)),
                        Change::Whiteout(_) => None,
                    };
                    if before.is_some() || after.is_some() {
                        step.files.push(FileChange {
                            path: format!("/{}", c.path()),
                            before,
                            after,
                        });
                    }
                }
                if let Some(first) = step.files.first() {
                    file.get_or_insert_with(|| first.path.clone());
                }
                if !changes.is_empty() {
                    let mtime = layer::parse_rfc3339(&meta.mtime).map_err(|e| anyhow!(e))?;
                    let new_layer = layer::build_changes(
                        &with_bytecode_whiteouts(&changes),
                        mtime,
                        family.layer_gzip(),
                    )
                    .with_context(|| format!("building the layer of {} for {what}", meta.id))?;
                    let base_layers = layers.len() + new_layers.len();
                    cur_config = rewrite::config_append(
                        &cur_config,
                        &cfg_desc.digest,
                        &manifest.digest,
                        &new_layer.diff_id,
                        &meta.id,
                        &meta.mtime,
                        &meta.title,
                        base_layers,
                    )
                    .map_err(|e| anyhow!(e))?;
                    cur_manifest = rewrite::manifest_append(
                        &cur_manifest,
                        "",
                        0,
                        &new_layer.media_type,
                        &new_layer.digest,
                        new_layer.bytes.len() as u64,
                    )
                    .map_err(|e| anyhow!(e))?;
                    step.layer = Some(new_layers.len());
                    new_layers.push(new_layer);
                }
                if let Some(c) = edited {
                    // The edit was made on the view's config, which is the current one.
                    cur_config =
                        rewrite::config_labelled(c, &cfg_desc.digest, &manifest.digest, &meta.id)
                            .map_err(|e| anyhow!(e))?;
                }
                // The next patch decides on what this one left (its config included).
                let now: Value = serde_json::from_slice(&cur_config)?;
                view.apply(&changes, Some(&now));
                step.reason = reason;
            }
            Verdict::AlreadyPatched { reason }
            | Verdict::NotAffected { reason }
            | Verdict::Refused { reason } => step.reason = reason,
        }
        steps.push(step);
    }

    let refusal = steps.iter().find(|s| s.outcome == Outcome::Refused);
    let outcome = match refusal {
        Some(_) => Outcome::Refused,
        None => steps
            .iter()
            .map(|s| s.outcome)
            .max()
            .unwrap_or(Outcome::NotAffected),
    };
    // One patch: its reason as it is (as before stacking existed); several: each named.
    let reason = match (refusal, steps.as_slice()) {
        (_, [one]) => one.reason.clone(),
        (Some(r), _) => format!("{}: {}", r.id, r.reason),
        (None, all) => all
            .iter()
            .map(|s| format!("{}: {}", s.id, s.reason))
            .collect::<Vec<_>>()
            .join("; "),
    };
    let mut plan = PlatformPlan {
        platform,
        original: manifest.clone(),
        outcome,
        reason,
        file,
        version,
        shape,
        layers_scanned: descent.layers_scanned,
        bytes_scanned: descent.bytes_scanned,
        new: None,
        patches: steps,
        recorded_original: None,
    };
    match outcome {
        Outcome::Patched => {
            let config_digest = crate::digest::sha256(&cur_config);
            let new_manifest = rewrite::manifest_set_config(
                &cur_manifest,
                &config_digest,
                cur_config.len() as u64,
            )
            .and_then(|m| rewrite::annotate_base(&m, &format!("{repo}:{tag}"), &manifest.digest))
            .map_err(|e| anyhow!(e))?;
            plan.new = Some(NewImage {
                layers: new_layers,
                config: cur_config,
                config_digest,
                manifest: new_manifest,
            });
        }
        Outcome::AlreadyPatched => plan.recorded_original = rewrite::recorded_original(&config),
        _ => {}
    }
    Ok(plan)
}
