//! The write side of an OCI layout: creation, the run's lock, and verified files (blobs,
//! `oci-layout`, `index.json`), each by temporary file, fsync and rename.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::dir::{Dir, Layout, LAYOUT_VERSION};
use crate::digest::sha256;
use crate::media::{Descriptor, OCI_INDEX};
use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;
use crate::registry::store::{one, Chunks, Source, Tally};

const WRITE: &str = "writing OCI layout";

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
async fn write_verified(
    root: &Path,
    dest: &Path,
    digest: &str,
    size: Option<u64>,
    chunks: Chunks,
    what: &str,
    op: &'static str,
) -> Result<(), Error> {
    let tmp = temp_path(root);
    let result = write_renamed(&tmp, dest, digest, size, chunks, what, op).await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}

/// [`write_verified`]'s steps, leaving `tmp` for the caller to remove on failure.
async fn write_renamed(
    tmp: &Path,
    dest: &Path,
    digest: &str,
    size: Option<u64>,
    mut chunks: Chunks,
    what: &str,
    op: &'static str,
) -> Result<(), Error> {
    let io = |e: std::io::Error| {
        Error::new(
            ErrorKind::Io,
            op,
            what,
            format!("writing {}: {e}", tmp.display()),
        )
    };
    let integrity = |detail: String| Error::new(ErrorKind::Integrity, op, what, detail);
    let mut f = tokio::fs::File::create(tmp).await.map_err(io)?;
    let mut tally = Tally::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        if !tally.add(&chunk, size) {
            return Err(integrity(format!(
                "the source sent more than the {} bytes the descriptor gives",
                size.unwrap_or(0)
            )));
        }
        f.write_all(&chunk).await.map_err(io)?;
    }
    if let Some(actual) = tally.mismatch(digest, size) {
        let n = tally.bytes;
        return Err(integrity(format!("digest mismatch: {n} bytes with digest {actual} arrived; refusing to store them as {digest}")));
    }
    // tokio's File writes in the background: a failed last write (a full disk) is only
    // reported by flush; sync_all would keep it to itself and a short file be renamed in.
    f.flush().await.map_err(io)?;
    f.sync_all().await.map_err(io)?;
    drop(f);
    tokio::fs::rename(tmp, dest).await.map_err(io)?;
    if let Some(parent) = dest.parent() {
        fsync_dir(parent).await.map_err(io)?;
    }
    Ok(())
}

impl Dir {
    /// Writes a whole file this tool made, verified like any blob.
    async fn write_bytes(
        &self,
        dest: &Path,
        digest: &str,
        bytes: Vec<u8>,
        what: &str,
        op: &'static str,
    ) -> Result<(), Error> {
        let size = bytes.len() as u64;
        write_verified(&self.path, dest, digest, Some(size), one(bytes), what, op).await
    }

    pub(super) async fn write_index(&self, index: &Value) -> Result<(), Error> {
        let bytes = serde_json::to_vec(index).unwrap_or_default();
        let what = format!("{} index.json", self.shown);
        let dest = self.path.join("index.json");
        self.write_bytes(&dest, &sha256(&bytes), bytes, &what, WRITE)
            .await
    }

    /// The path `desc`'s blob goes to; `None` when it is there already.
    fn blob_dest(
        &self,
        digest: &str,
        what: &str,
        op: &'static str,
    ) -> Result<Option<PathBuf>, Error> {
        let dest = self
            .blob(digest)
            .ok_or_else(|| Error::new(ErrorKind::Invalid, op, what, "not a sha256 digest"))?;
        Ok((!dest.is_file()).then_some(dest))
    }
}

impl Layout {
    /// The layout ready for writes: created when missing, and locked for the rest of the run.
    pub(super) async fn writable(&self, repo: &Repo) -> Result<Arc<Dir>, Error> {
        let dir = self.dir(repo);
        let mut lock = dir.lock.lock().await;
        if lock.is_some() {
            drop(lock);
            return Ok(dir);
        }
        let io = |e: std::io::Error| Error::new(ErrorKind::Io, WRITE, &dir.shown, e.to_string());
        let blobs = dir.path.join("blobs/sha256");
        if dir.index().await?.is_none() {
            tokio::fs::create_dir_all(&blobs).await.map_err(io)?;
            let marker = serde_json::to_vec(&json!({ "imageLayoutVersion": LAYOUT_VERSION }))
                .unwrap_or_default();
            let dest = dir.path.join("oci-layout");
            dir.write_bytes(&dest, &sha256(&marker), marker, &dir.shown, WRITE)
                .await?;
        }
        tokio::fs::create_dir_all(&blobs).await.map_err(io)?;
        let file = std::fs::File::open(dir.path.join("oci-layout")).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::new(ErrorKind::Locked, WRITE, &dir.shown, "another run is writing this layout (its oci-layout file is locked); refusing, one writer at a time"));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        // Holding the lock, no other run writes here: temporary files are a killed run's.
        sweep(&dir.path).await;
        if !dir.path.join("index.json").exists() {
            let empty = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []});
            dir.write_index(&empty).await?;
        }
        *lock = Some(file);
        drop(lock);
        Ok(dir)
    }

    pub(super) async fn write_blob(
        &self,
        repo: &Repo,
        digest: &str,
        bytes: Vec<u8>,
    ) -> Result<(), Error> {
        let what = format!("{repo}@{digest}");
        let op = "uploading blob";
        let dir = self.writable(repo).await?;
        match dir.blob_dest(digest, &what, op)? {
            Some(dest) => dir.write_bytes(&dest, digest, bytes, &what, op).await,
            None => Ok(()),
        }
    }

    pub(super) async fn receive_blob(
        &self,
        target: &Repo,
        desc: &Descriptor,
        what: &str,
        source: Source<'_>,
    ) -> Result<(), Error> {
        let op = "copying blob";
        let dir = self.writable(target).await?;
        let Some(dest) = dir.blob_dest(&desc.digest, what, op)? else {
            return Ok(());
        };
        let size = Some(desc.size);
        write_verified(&dir.path, &dest, &desc.digest, size, source(), what, op).await
    }
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
