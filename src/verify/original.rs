//! A patched platform against the original a digest map names: the same layers in the same
//! order, and a config equal to the original's but for what the patches applied since appended
//! (each config edit replayed, each layer's diff_id and history entry as the image holds them).

use serde_json::Value;

use crate::media::{self, Descriptor, Document};
use crate::registry::Repo;
use crate::rewrite::{ORIGINAL_LABEL, PATCH_LABEL};
use crate::verify::added::Added;
use crate::verify::subject::{ours, Subject};
use crate::verify::types::Error;

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

/// The layers: the original's, unchanged and in order, plus one per new patch that appends.
fn layer_problems(s: &Subject<'_>, orig: &Document, new_layers: usize, problems: &mut Vec<String>) {
    let layers_of = |d: &Document| {
        d.json
            .get("layers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (ol, nl) = (layers_of(orig), layers_of(s.manifest));
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
}

/// The original's config with what the run added replayed: each new patch's layer (its diff_id
/// and history entry as the image holds them) and config edit, in order.
fn replay(
    s: &Subject<'_>,
    mut expect: Value,
    new_ids: &[&String],
    new_layers: usize,
    added: &Added,
    problems: &mut Vec<String>,
) -> Value {
    let mut entries = s.config["history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| ours(h).is_some_and(|(_, empty)| !empty))
        .cloned()
        .collect::<Vec<_>>();
    entries = entries.split_off(entries.len().saturating_sub(new_layers));
    let mut entries = entries.into_iter();
    let mut next_layer = added.ids.len().saturating_sub(new_layers);
    for id in new_ids {
        let patch = s.checks.find(id);
        if patch.is_none_or(|p| p.kind().adds_layer()) {
            if let (Some(d), Some(list)) = (
                added.ids.get(next_layer),
                expect["rootfs"]["diff_ids"].as_array_mut(),
            ) {
                list.push(Value::String(d.clone()));
            }
            next_layer += 1;
            if let (Some(h), Some(list)) = (entries.next(), expect["history"].as_array_mut()) {
                list.push(h);
            }
        }
        if let Some(p) = patch {
            match p.kind().edit_config(&expect) {
                Ok(Some(v)) => expect = v,
                Ok(None) => {}
                Err(why) => problems.push(format!("patch {id}: {why}")),
            }
        }
    }
    expect
}

/// Checks a patched platform against the original it was made from (and the repository
/// holding it).
pub(crate) async fn check(
    s: &Subject<'_>,
    (orig_repo, orig): (&Repo, &Document),
    added: &Added,
    problems: &mut Vec<String>,
) -> Result<(), Error> {
    if orig.media_type != s.manifest.media_type {
        problems.push(format!(
            "manifest media type {} differs from the original's {}",
            s.manifest.media_type, orig.media_type
        ));
    }
    let ocd = Descriptor::from_json(
        orig.json.get("config").unwrap_or(&Value::Null),
        "original config",
    )?;
    let bytes = s
        .reg
        .blob_get_small(orig_repo, &ocd, media::CONFIG_MAX_BYTES)
        .await?;
    let expect: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::Invalid(format!("original config {}: {e}", ocd.digest)))?;
    let before = crate::rewrite::patches_of(&expect);
    let new_ids: Vec<&String> = s.named.iter().filter(|n| !before.contains(n)).collect();
    let new_layers = new_ids
        .iter()
        .filter(|id| s.checks.find(id).is_none_or(|p| p.kind().adds_layer()))
        .count()
        .max(usize::from(new_ids.is_empty() && s.wants_layer));
    layer_problems(s, orig, new_layers, problems);
    let mut expect = replay(s, expect, &new_ids, new_layers, added, problems);
    if expect["config"]["Labels"].is_null() {
        expect["config"]["Labels"] = Value::Object(Default::default());
    }
    expect["config"]["Labels"][PATCH_LABEL] = Value::String(s.label.clone());
    // A patched config names its original manifest (the first one, when patches stack);
    // a wrong value shows as a difference at that label.
    if s.config["config"]["Labels"].get(ORIGINAL_LABEL).is_some()
        && expect["config"]["Labels"].get(ORIGINAL_LABEL).is_none()
    {
        expect["config"]["Labels"][ORIGINAL_LABEL] = Value::String(orig.digest.clone());
    }
    if let Some(d) = first_difference(&expect, &s.config, "config") {
        problems.push(format!(
            "the config differs from the original beyond the patch at {d}"
        ));
    }
    Ok(())
}
