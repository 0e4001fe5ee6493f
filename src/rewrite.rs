//! Minimal edits on JSON values: append the new layer to a config and a manifest, and point an
//! index at the patched children. Everything not named here keeps its value and its place
//! (serde_json keeps key order), so Docker-only fields survive.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::media::{is_attestation, Document, Error, OCI_MANIFEST};

/// The label recording which patches an image carries (comma-separated ids).
pub const PATCH_LABEL: &str = "dev.runner-patch.patches";

/// The config label (and, on an OCI index, the annotation) naming the manifest this image was
/// patched from, so a patched image tells its original even when the digest map is lost.
pub const ORIGINAL_LABEL: &str = "dev.runner-patch.original";

/// The original manifest digest a patched config names, if it is a well-formed digest.
pub fn recorded_original(config: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(config).ok()?;
    well_formed(v.get("config")?.get("Labels")?.get(ORIGINAL_LABEL)?)
}

/// The original index digest a patched OCI index names in its annotations.
pub fn index_recorded_original(index: &Document) -> Option<String> {
    well_formed(index.json.get("annotations")?.get(ORIGINAL_LABEL)?)
}

fn well_formed(v: &Value) -> Option<String> {
    let s = v.as_str()?;
    let hex = s.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| s.to_owned())
}

/// Names the original index in a patched OCI index's annotations (kept if a patch already set
/// it). A Docker manifest list has no annotations in its schema and is returned unchanged.
pub fn index_record_original(index: &Document, original: &str) -> Result<Document, Error> {
    if index.media_type != crate::media::OCI_INDEX {
        return Ok(index.clone());
    }
    let mut v = index.json.clone();
    let obj = v
        .as_object_mut()
        .ok_or_else(|| Error::invalid(format!("index {} is not a JSON object", index.digest)))?;
    let ann = obj
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    let ann = ann.as_object_mut().ok_or_else(|| {
        Error::invalid(format!(
            "index {}: annotations is not an object",
            index.digest
        ))
    })?;
    ann.entry(ORIGINAL_LABEL)
        .or_insert_with(|| Value::String(original.to_owned()));
    Ok(Document::from_value(v, &index.media_type))
}

/// Appends a diff_id, a history entry and the patch labels to an image config.
#[allow(clippy::too_many_arguments)]
pub fn config_append(
    config: &[u8],
    config_digest: &str,
    original_manifest: &str,
    diff_id: &str,
    patch_id: &str,
    created: &str,
    comment: &str,
    layer_count: usize,
) -> Result<Vec<u8>, Error> {
    let mut v: Value = serde_json::from_slice(config)
        .map_err(|e| Error::invalid(format!("config {config_digest} is not JSON: {e}")))?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| Error::invalid(format!("config {config_digest} is not a JSON object")))?;
    let diff_ids = obj
        .get_mut("rootfs")
        .and_then(|r| r.get_mut("diff_ids"))
        .and_then(Value::as_array_mut)
        .ok_or_else(|| Error::invalid(format!("config {config_digest} has no rootfs.diff_ids")))?;
    if diff_ids.len() != layer_count {
        return Err(Error::invalid(format!(
            "config {config_digest} lists {} diff_ids for {layer_count} layers; refusing to extend an inconsistent image",
            diff_ids.len()
        )));
    }
    diff_ids.push(Value::String(diff_id.to_owned()));
    let history = obj
        .entry("history")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(h) = history.as_array_mut() {
        h.push(json!({
            "created": created,
            "created_by": format!("runner-patch: {patch_id}"),
            "comment": comment,
        }));
    } else {
        return Err(Error::invalid(format!(
            "config {config_digest}: history is not a list"
        )));
    }
    label_patch(obj, config_digest, original_manifest, patch_id)?;
    serde_json::to_vec(&v)
        .map_err(|e| Error::invalid(format!("config {config_digest}: cannot serialise: {e}")))
}

/// Adds `patch_id` to the patch label (once) and names the original manifest (the first one
/// stays: a later patch on a patched image keeps naming the unpatched one).
fn label_patch(
    obj: &mut Map<String, Value>,
    config_digest: &str,
    original_manifest: &str,
    patch_id: &str,
) -> Result<(), Error> {
    let cfg = obj
        .entry("config")
        .or_insert_with(|| Value::Object(Map::new()));
    if cfg.is_null() {
        *cfg = Value::Object(Map::new());
    }
    let cfg = cfg.as_object_mut().ok_or_else(|| {
        Error::invalid(format!("config {config_digest}: config is not an object"))
    })?;
    let labels = cfg
        .entry("Labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if labels.is_null() {
        *labels = Value::Object(Map::new());
    }
    let labels = labels.as_object_mut().ok_or_else(|| {
        Error::invalid(format!(
            "config {config_digest}: config.Labels is not an object"
        ))
    })?;
    let value = match labels.get(PATCH_LABEL).and_then(Value::as_str) {
        Some(old) if old.split(',').any(|p| p == patch_id) => old.to_owned(),
        Some(old) if !old.is_empty() => format!("{old},{patch_id}"),
        _ => patch_id.to_owned(),
    };
    labels.insert(PATCH_LABEL.to_owned(), Value::String(value));
    labels
        .entry(ORIGINAL_LABEL)
        .or_insert_with(|| Value::String(original_manifest.to_owned()));
    Ok(())
}

/// Labels a config a patch edited without a layer (an `env` patch, which appended its own
/// `empty_layer` history entry): the patch label and the original.
pub fn config_labelled(
    mut config: Value,
    config_digest: &str,
    original_manifest: &str,
    patch_id: &str,
) -> Result<Vec<u8>, Error> {
    let obj = config
        .as_object_mut()
        .ok_or_else(|| Error::invalid(format!("config {config_digest} is not a JSON object")))?;
    label_patch(obj, config_digest, original_manifest, patch_id)?;
    serde_json::to_vec(&config)
        .map_err(|e| Error::invalid(format!("config {config_digest}: cannot serialise: {e}")))
}

/// The patch ids a config's label lists, in the order they were applied.
pub fn patches_of(config: &Value) -> Vec<String> {
    config["config"]["Labels"][PATCH_LABEL]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Points a manifest at the new config and appends the new layer descriptor.
pub fn manifest_append(
    manifest: &Document,
    config_digest: &str,
    config_size: u64,
    layer_media_type: &str,
    layer_digest: &str,
    layer_size: u64,
) -> Result<Document, Error> {
    let mut v = manifest.json.clone();
    let what = format!("manifest {}", manifest.digest);
    let cfg = v
        .get_mut("config")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Error::invalid(format!("{what} has no config descriptor")))?;
    cfg.insert("digest".into(), Value::String(config_digest.to_owned()));
    cfg.insert("size".into(), Value::from(config_size));
    let layers = v
        .get_mut("layers")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| Error::invalid(format!("{what} has no layers list")))?;
    layers.push(json!({"mediaType": layer_media_type, "size": layer_size, "digest": layer_digest}));
    Ok(Document::from_value(v, &manifest.media_type))
}

/// Points a manifest at a config (the last step of stacking several patches' layers).
pub fn manifest_set_config(
    manifest: &Document,
    config_digest: &str,
    config_size: u64,
) -> Result<Document, Error> {
    let mut v = manifest.json.clone();
    let cfg = v
        .get_mut("config")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| {
            Error::invalid(format!(
                "manifest {} has no config descriptor",
                manifest.digest
            ))
        })?;
    cfg.insert("digest".into(), Value::String(config_digest.to_owned()));
    cfg.insert("size".into(), Value::from(config_size));
    Ok(Document::from_value(v, &manifest.media_type))
}

/// The OCI annotations naming the image a patched manifest was made from.
pub const BASE_NAME: &str = "org.opencontainers.image.base.name";
pub const BASE_DIGEST: &str = "org.opencontainers.image.base.digest";

/// Points an OCI manifest's base annotations at the original it was made from (replacing any
/// the build set: the patched image's base is the original). A Docker v2 manifest has no
/// annotations and is returned as it is.
pub fn annotate_base(manifest: &Document, name: &str, digest: &str) -> Result<Document, Error> {
    if manifest.media_type != OCI_MANIFEST {
        return Ok(manifest.clone());
    }
    let mut v = manifest.json.clone();
    let what = format!("manifest {}", manifest.digest);
    let obj = v
        .as_object_mut()
        .ok_or_else(|| Error::invalid(format!("{what} is not a JSON object")))?;
    let ann = obj
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if ann.is_null() {
        *ann = Value::Object(Map::new());
    }
    let ann = ann
        .as_object_mut()
        .ok_or_else(|| Error::invalid(format!("{what}: annotations is not an object")))?;
    ann.insert(BASE_NAME.into(), Value::String(name.to_owned()));
    ann.insert(BASE_DIGEST.into(), Value::String(digest.to_owned()));
    Ok(Document::from_value(v, &manifest.media_type))
}

/// Replaces child descriptors in place (same order, platform and annotations) and drops
/// attestation children, which would point at pre-patch digests. Returns the dropped digests.
pub fn index_replace(
    index: &Document,
    replaced: &HashMap<String, (String, u64)>,
) -> Result<(Document, Vec<String>), Error> {
    let mut v = index.json.clone();
    let what = format!("index {}", index.digest);
    let manifests = v
        .get_mut("manifests")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| Error::invalid(format!("{what} has no manifests list")))?;
    let mut dropped = Vec::new();
    manifests.retain(|m| {
        if is_attestation(m) {
            dropped.push(
                m.get("digest")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            );
            false
        } else {
            true
        }
    });
    for m in manifests.iter_mut() {
        let old = m
            .get("digest")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if let Some((digest, size)) = replaced.get(&old) {
            if let Some(o) = m.as_object_mut() {
                o.insert("digest".into(), Value::String(digest.clone()));
                o.insert("size".into(), Value::from(*size));
            }
        }
    }
    Ok((Document::from_value(v, &index.media_type), dropped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_edit_keeps_unknown_fields_and_order() {
        let cfg = br#"{"architecture":"amd64","container_config":{"Hostname":"x","Cmd":["a"]},"config":{"Env":["A=1"],"Labels":null},"docker_version":"24.0","rootfs":{"type":"layers","diff_ids":["sha256:aa"]},"history":[{"created_by":"x"}],"zzz":1}"#;
        let out = config_append(
            cfg,
            "sha256:c",
            "sha256:m",
            "sha256:bb",
            "p1",
            "2026-11-30T00:00:00Z",
            "c",
            1,
        )
        .expect("edit");
        let v: Value = serde_json::from_slice(&out).expect("json");
        let keys: Vec<&String> = v.as_object().expect("obj").keys().collect();
        assert_eq!(
            keys,
            [
                "architecture",
                "container_config",
                "config",
                "docker_version",
                "rootfs",
                "history",
                "zzz"
            ]
        );
        assert_eq!(v["container_config"]["Hostname"], "x");
        assert_eq!(v["rootfs"]["diff_ids"][1], "sha256:bb");
        assert_eq!(v["history"][1]["created_by"], "runner-patch: p1");
        assert_eq!(v["config"]["Labels"][PATCH_LABEL], "p1");
        assert_eq!(v["config"]["Labels"][ORIGINAL_LABEL], "sha256:m");
        assert!(
            config_append(cfg, "sha256:c", "sha256:m", "sha256:bb", "p1", "t", "c", 2).is_err()
        );
    }

    #[test]
    fn base_annotations_on_oci_manifests_only() {
        let oci = Document::parse(
            br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"c","digest":"sha256:c","size":1},"layers":[],"annotations":{"k":"v","org.opencontainers.image.base.name":"docker.io/library/ubuntu:22.04"}}"#.to_vec(),
            "oci",
        )
        .expect("parse");
        let out = annotate_base(&oci, "r/x:t", "sha256:o").expect("annotate");
        let ann = out.json["annotations"].as_object().expect("annotations");
        assert_eq!(
            ann.keys().collect::<Vec<_>>(),
            ["k", BASE_NAME, BASE_DIGEST]
        );
        assert_eq!(ann[BASE_NAME], "r/x:t");
        assert_eq!(ann[BASE_DIGEST], "sha256:o");
        // No mediaType field (umoci): still OCI, and it gets them too.
        let bare = Document::parse(
            br#"{"schemaVersion":2,"config":{},"layers":[]}"#.to_vec(),
            "bare",
        )
        .expect("parse");
        assert_eq!(
            annotate_base(&bare, "n", "d").expect("annotate").json["annotations"][BASE_DIGEST],
            "d"
        );
        let docker = Document::parse(
            br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{},"layers":[]}"#.to_vec(),
            "docker",
        )
        .expect("parse");
        let same = annotate_base(&docker, "n", "d").expect("annotate");
        assert_eq!(same.bytes, docker.bytes);
        assert!(same.json.get("annotations").is_none());
    }

    #[test]
    fn index_keeps_order_and_drops_attestations() {
        let idx = Document::parse(
            br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"m","digest":"sha256:a","size":1,"platform":{"os":"linux","architecture":"amd64"},"annotations":{"k":"v"}},{"mediaType":"m","digest":"sha256:b","size":2,"platform":{"os":"linux","architecture":"arm64"}},{"mediaType":"m","digest":"sha256:c","size":3,"platform":{"os":"unknown","architecture":"unknown"}}]}"#.to_vec(),
            "test index",
        )
        .expect("parse");
        let mut r = HashMap::new();
        r.insert("sha256:a".to_owned(), ("sha256:a2".to_owned(), 10));
        let (out, dropped) = index_replace(&idx, &r).expect("rewrite");
        assert_eq!(dropped, ["sha256:c"]);
        let m = out.json["manifests"].as_array().expect("list");
        assert_eq!(m.len(), 2);
        assert_eq!(m[0]["digest"], "sha256:a2");
        assert_eq!(m[0]["size"], 10);
        assert_eq!(m[0]["annotations"]["k"], "v");
        assert_eq!(m[1]["digest"], "sha256:b");
    }
}
