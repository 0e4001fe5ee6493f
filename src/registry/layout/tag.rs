//! Storing a manifest in a layout and naming it in `index.json`, only once every blob it names
//! (down to the layers of each child manifest) is in the layout.

use oci_spec::distribution::Reference;
use serde_json::{json, Value};

use super::dir::{Dir, Layout, REF_NAME};
use super::index::ref_name;
use crate::media::{self, Descriptor, Document, MANIFEST_ACCEPT};
use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;

impl Layout {
    pub(super) async fn tag_manifest(
        &self,
        r: &Reference,
        doc: &Document,
    ) -> Result<Option<String>, Error> {
        let repo = Repo::of(r);
        let what = r.whole();
        let dir = self.writable(&repo).await?;
        if !MANIFEST_ACCEPT.contains(&doc.media_type.as_str()) {
            return Err(Error::new(
                ErrorKind::Invalid,
                "pushing manifest",
                &what,
                format!("media type {:?} is not a manifest type", doc.media_type),
            ));
        }
        self.write_blob(&repo, &doc.digest, doc.bytes.clone())
            .await?;
        let Some(tag) = r.tag().filter(|_| r.digest().is_none()) else {
            return Ok(None);
        };
        let _order = dir.lock.lock().await;
        check_complete(&dir, doc).await?;
        let mut index = dir
            .index()
            .await?
            .unwrap_or_else(|| json!({"schemaVersion": 2, "manifests": []}));
        let entry = json!({
            "mediaType": doc.media_type,
            "digest": doc.digest,
            "size": doc.bytes.len(),
            "annotations": { REF_NAME: tag },
        });
        if let Some(list) = index.get_mut("manifests").and_then(Value::as_array_mut) {
            retag(list, tag, entry);
        }
        dir.write_index(&index).await?;
        Ok(None)
    }
}

/// Puts `entry` where the tag's entry stood (or last); other entries of the name go.
fn retag(list: &mut Vec<Value>, tag: &str, entry: Value) {
    let names = |e: &Value| ref_name(e) == Some(tag);
    match list.iter().position(names) {
        Some(i) => {
            list[i] = entry;
            let mut k = 0;
            list.retain(|e| {
                k += 1;
                k - 1 == i || !names(e)
            });
        }
        None => list.push(entry),
    }
}

/// The descriptors of the blobs a manifest names: its config and its layers.
fn blobs_of(doc: &Value) -> impl Iterator<Item = Value> + '_ {
    let layers = doc.get("layers").and_then(Value::as_array);
    doc.get("config")
        .into_iter()
        .chain(layers.into_iter().flatten())
        .cloned()
}

/// Refuses to tag `doc` unless every blob it names is in the layout, children's included.
async fn check_complete(dir: &Dir, doc: &Document) -> Result<(), Error> {
    let what = format!("{}@{}", dir.shown, doc.digest);
    let missing = |d: &str| {
        Error::new(
            ErrorKind::BlobUnknown,
            "tagging",
            &what,
            format!("blob {d} it names is not in the layout; refusing to write index.json"),
        )
    };
    let descriptor = |v: &Value| {
        Descriptor::from_json(v, &what).map_err(|e| Error::document("tagging", &what, e))
    };
    let mut blobs: Vec<Value> = blobs_of(&doc.json).collect();
    for child in doc
        .json
        .get("manifests")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let d = descriptor(child)?;
        let path = dir.blob(&d.digest).ok_or_else(|| missing(&d.digest))?;
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|_| missing(&d.digest))?;
        if let Ok(child) = Document::parse(bytes, "a child manifest") {
            blobs.extend(blobs_of(&child.json));
        }
    }
    for b in blobs {
        let d = descriptor(&b)?;
        if !dir.has(&d.digest) && !media::is_foreign(&d) {
            return Err(missing(&d.digest));
        }
    }
    Ok(())
}
