//! Reading a layout's `index.json`: the layout's presence and version, its entries, and the
//! entry that names a tag.

use serde_json::Value;

use super::dir::{Dir, LAYOUT_VERSION, REF_NAME};
use crate::registry::error::{Error, ErrorKind};

/// `index.json` is read whole; a bound keeps a hostile one from filling memory.
const INDEX_MAX_BYTES: u64 = 64 * 1024 * 1024;

const READ: &str = "reading OCI layout";

/// The tag an `index.json` entry names, if any.
pub(super) fn ref_name(entry: &Value) -> Option<&str> {
    entry
        .pointer("/annotations")
        .and_then(|a| a.get(REF_NAME))
        .and_then(Value::as_str)
}

/// The entries of an `index.json`.
pub(super) fn entries(index: &Value) -> impl Iterator<Item = &Value> {
    index["manifests"].as_array().into_iter().flatten()
}

impl Dir {
    fn error(&self, kind: ErrorKind, detail: impl Into<String>) -> Error {
        Error::new(kind, READ, &self.shown, detail)
    }

    /// `index.json`, or `None` when there is no layout at the path (nothing there yet).
    pub async fn index(&self) -> Result<Option<Value>, Error> {
        let marker = match tokio::fs::read(self.path.join("oci-layout")).await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self.path.join("index.json").exists() {
                    return Err(self.error(ErrorKind::Protocol, "it has an index.json but no oci-layout file, so it is not an OCI image layout"));
                }
                return Ok(None);
            }
            Err(e) => return Err(self.error(ErrorKind::Io, format!("reading oci-layout: {e}"))),
        };
        let version = serde_json::from_slice::<Value>(&marker)
            .ok()
            .and_then(|v| v.get("imageLayoutVersion")?.as_str().map(str::to_owned));
        if version.as_deref() != Some(LAYOUT_VERSION) {
            return Err(self.error(ErrorKind::Unsupported, format!("its oci-layout file gives imageLayoutVersion {version:?}; only {LAYOUT_VERSION:?} is known")));
        }
        let path = self.path.join("index.json");
        let io = |e: std::io::Error| self.error(ErrorKind::Io, format!("index.json: {e}"));
        let len = tokio::fs::metadata(&path).await.map_err(io)?.len();
        if len > INDEX_MAX_BYTES {
            return Err(self.error(
                ErrorKind::TooLarge,
                format!("index.json is {len} bytes, over the {INDEX_MAX_BYTES} byte limit"),
            ));
        }
        let bytes = tokio::fs::read(&path).await.map_err(io)?;
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| self.error(ErrorKind::Protocol, format!("index.json is not JSON: {e}")))?;
        if !v.get("manifests").is_some_and(Value::is_array) {
            return Err(self.error(ErrorKind::Protocol, "index.json has no manifests list"));
        }
        Ok(Some(v))
    }

    /// The descriptor `index.json` names `tag` with; two entries of one name that disagree are
    /// refused rather than one picked.
    pub async fn tagged(&self, tag: &str) -> Result<Option<Value>, Error> {
        let Some(index) = self.index().await? else {
            return Ok(None);
        };
        let mut found: Option<Value> = None;
        for e in entries(&index).filter(|e| ref_name(e) == Some(tag)) {
            match &found {
                Some(f) if f.get("digest") != e.get("digest") => {
                    return Err(self.error(ErrorKind::Protocol, format!("index.json names two different manifests {tag:?}; refusing to pick one")));
                }
                _ => found = Some(e.clone()),
            }
        }
        Ok(found)
    }

    /// Every tag `index.json` names, sorted, once each.
    pub async fn tags(&self) -> Result<Vec<String>, Error> {
        let Some(index) = self.index().await? else {
            return Err(Error::new(
                ErrorKind::NotFound,
                "listing tags of",
                &self.shown,
                self.absent(),
            ));
        };
        let mut tags: Vec<String> = entries(&index)
            .filter_map(|e| ref_name(e).map(str::to_owned))
            .collect();
        tags.sort();
        tags.dedup();
        Ok(tags)
    }
}
