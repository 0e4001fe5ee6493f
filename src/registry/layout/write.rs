//! The write side of an OCI layout: creation, the run's lock, verified blob files and the
//! `index.json` rewrite, each by temporary file, fsync and rename.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{json, Value};
use sha2::Digest as _;
use tokio::io::AsyncWriteExt;

use super::{blob_path, err, Dir, Layout, LAYOUT_VERSION};
use crate::digest::sha256;
use crate::media::{self, Descriptor, Document, OCI_INDEX};
use crate::registry::store::Chunks;
use crate::registry::{RegistryError, Repo};

/// A temporary name in the layout's own directory (so the rename stays on one file system);
/// readers of the layout never look at names starting with a dot.
fn temp_path(root: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    root.join(format!(".runner-patch-{}-{n}.tmp", std::process::id()))
}

async fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    tokio::fs::File::open(dir).await?.sync_all().await
}

/// Writes `chunks` to `dest` by way of a temporary file: the bytes must have `digest` and, when
/// given, `size`; then fsync, rename, fsync of the directory. Nothing is left behind on failure.
pub(super) async fn write_verified(
    root: &Path,
    dest: &Path,
    digest: &str,
    size: Option<u64>,
    mut chunks: Chunks,
    what: &str,
    op: &'static str,
) -> Result<(), RegistryError> {
    let tmp = temp_path(root);
    let io = |e: std::io::Error| err(op, what, format!("writing {}: {e}", tmp.display()));
    let result = async {
        let mut f = tokio::fs::File::create(&tmp).await.map_err(io)?;
        let mut hasher = sha2::Sha256::new();
        let mut n = 0u64;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            n += chunk.len() as u64;
            if size.is_some_and(|s| n > s) {
                return Err(err(op, what, format!("the source sent more than the {} bytes the descriptor gives", size.unwrap_or(0))));
            }
            hasher.update(&chunk);
            f.write_all(&chunk).await.map_err(io)?;
        }
        let actual = crate::digest::finish(hasher);
        if actual != digest || size.is_some_and(|s| s != n) {
            return Err(err(op, what, format!("digest mismatch: {n} bytes with digest {actual} arrived; refusing to store them as {digest}")));
        }
        // tokio's File writes in the background: a failed last write (a full disk) is only
        // reported by flush; sync_all would keep it to itself and a short file be renamed in.
        f.flush().await.map_err(io)?;
        f.sync_all().await.map_err(io)?;
        drop(f);
        tokio::fs::rename(&tmp, dest).await.map_err(io)?;
        if let Some(parent) = dest.parent() {
            fsync_dir(parent).await.map_err(io)?;
        }
        Ok(())
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}

pub(super) fn one(bytes: Vec<u8>) -> Chunks {
    Box::pin(futures_util::stream::once(
        async move { Ok(Bytes::from(bytes)) },
    ))
}

impl Layout {
    /// The layout ready for writes: created when missing, and locked for the rest of the run.
    pub(super) async fn writable(&self, repo: &Repo) -> Result<Arc<Dir>, RegistryError> {
        let dir = self.dir(repo);
        let op = "writing OCI layout";
        let mut lock = dir.lock.lock().await;
        if lock.is_some() {
            drop(lock);
            return Ok(dir);
        }
        let io = |e: std::io::Error| err(op, &dir.shown, e.to_string());
        if Self::index(&dir).await?.is_none() {
            tokio::fs::create_dir_all(dir.path.join("blobs/sha256"))
                .await
                .map_err(io)?;
            let marker = serde_json::to_vec(&json!({ "imageLayoutVersion": LAYOUT_VERSION }))
                .unwrap_or_default();
            let marker_digest = sha256(&marker);
            let what = dir.shown.clone();
            write_verified(
                &dir.path,
                &dir.path.join("oci-layout"),
                &marker_digest,
                None,
                one(marker),
                &what,
                op,
            )
            .await?;
        }
        tokio::fs::create_dir_all(dir.path.join("blobs/sha256"))
            .await
            .map_err(io)?;
        let file = std::fs::File::open(dir.path.join("oci-layout")).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(err(op, &dir.shown, "another run is writing this layout (its oci-layout file is locked); refusing, one writer at a time"));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        // Holding the lock, no other run writes here: temporary files are a killed run's.
        Self::sweep(&dir.path).await;
        if !dir.path.join("index.json").exists() {
            let empty = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []});
            Self::write_index(&dir, &empty).await?;
        }
        *lock = Some(file);
        drop(lock);
        Ok(dir)
    }

    pub(super) async fn write_index(dir: &Dir, index: &Value) -> Result<(), RegistryError> {
        let bytes = serde_json::to_vec(index).unwrap_or_default();
        let digest = sha256(&bytes);
        let what = format!("{} index.json", dir.shown);
        write_verified(
            &dir.path,
            &dir.path.join("index.json"),
            &digest,
            None,
            one(bytes),
            &what,
            "writing OCI layout",
        )
        .await
    }

    /// Refuses to tag `doc` unless every blob it names is in the layout, children's included.
    pub(super) async fn check_complete(dir: &Dir, doc: &Document) -> Result<(), RegistryError> {
        let what = format!("{}@{}", dir.shown, doc.digest);
        let missing = |d: &str| {
            err(
                "tagging",
                &what,
                format!("blob {d} it names is not in the layout; refusing to write index.json"),
            )
        };
        let mut blobs: Vec<Value> = doc.json.get("config").into_iter().cloned().collect();
        blobs.extend(
            doc.json
                .get("layers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .cloned(),
        );
        for child in doc
            .json
            .get("manifests")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let d = Descriptor::from_json(child, &what)
                .map_err(|e| err("tagging", &what, e.to_string()))?;
            let path = blob_path(&dir.path, &d.digest).ok_or_else(|| missing(&d.digest))?;
            let bytes = tokio::fs::read(&path)
                .await
                .map_err(|_| missing(&d.digest))?;
            if let Ok(child) = Document::parse(bytes, "a child manifest") {
                blobs.extend(child.json.get("config").into_iter().cloned());
                blobs.extend(
                    child
                        .json
                        .get("layers")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .cloned(),
                );
            }
        }
        for b in blobs {
            let d = Descriptor::from_json(&b, &what)
                .map_err(|e| err("tagging", &what, e.to_string()))?;
            let present = blob_path(&dir.path, &d.digest).is_some_and(|p| p.is_file());
            if !present && !media::is_foreign(&d) {
                return Err(missing(&d.digest));
            }
        }
        Ok(())
    }

    /// Removes the temporary files a killed run left in the layout (never named by index.json).
    async fn sweep(root: &Path) {
        let Ok(mut entries) = tokio::fs::read_dir(root).await else {
            return;
        };
        while let Ok(Some(e)) = entries.next_entry().await {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".runner-patch-") && name.ends_with(".tmp") {
                tracing::debug!(
                    "removing {name}, left in {} by a killed run",
                    root.display()
                );
                let _ = tokio::fs::remove_file(e.path()).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::store::Store;

    #[tokio::test]
    async fn a_tag_is_never_written_before_every_blob_it_names() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("new");
        let repo = Repo::parse(&format!("oci:{}", path.display())).expect("repo");
        let store = Layout::default();
        let config = b"{}".to_vec();
        let layer = b"not really a layer".to_vec();
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": crate::media::OCI_MANIFEST,
            "config": {"mediaType": crate::media::OCI_CONFIG, "digest": sha256(&config), "size": config.len()},
            "layers": [{"mediaType": crate::media::OCI_LAYER_GZIP, "digest": sha256(&layer), "size": layer.len()}],
        });
        let doc = Document::from_value(manifest, crate::media::OCI_MANIFEST);
        store
            .blob_put(&repo, &sha256(&config), config)
            .await
            .expect("config");
        // The layout was created, empty; the layer is missing, so the tag is refused.
        let e = store
            .manifest_put_answer(&repo.at_tag("t"), &doc)
            .await
            .expect_err("missing layer");
        assert!(e.to_string().contains(&sha256(&layer)), "{e}");
        assert!(store.tags_list(&repo).await.expect("tags").is_empty());
        // A blob whose bytes are not its digest is not stored.
        let wrong = store
            .blob_put(&repo, &sha256(b"other"), layer.clone())
            .await;
        assert!(wrong.is_err());
        store
            .blob_put(&repo, &sha256(&layer), layer)
            .await
            .expect("layer");
        store
            .manifest_put_answer(&repo.at_tag("t"), &doc)
            .await
            .expect("tag");
        assert_eq!(
            store.tags_list(&repo).await.expect("tags"),
            vec!["t".to_owned()]
        );
        let back = store.manifest_get(&repo.at_tag("t")).await.expect("get");
        assert_eq!(
            (back.digest, back.media_type),
            (doc.digest.clone(), doc.media_type.clone())
        );
        // Nothing temporary is left, and only blobs that hash to their names are there.
        for e in std::fs::read_dir(&path).expect("dir").flatten() {
            assert!(!e.file_name().to_string_lossy().ends_with(".tmp"));
        }
        for e in std::fs::read_dir(path.join("blobs/sha256"))
            .expect("blobs")
            .flatten()
        {
            let bytes = std::fs::read(e.path()).expect("blob");
            assert_eq!(
                sha256(&bytes),
                format!("sha256:{}", e.file_name().to_string_lossy())
            );
        }
    }
}
