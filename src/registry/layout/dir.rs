//! The layout directories of a run: where each is, how it is named in messages, its write
//! lock, and where a blob lives in it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::digest::is_sha256;
use crate::registry::repo::Repo;

/// The annotation that names a tag in `index.json`.
pub(super) const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The only layout version there is.
pub(super) const LAYOUT_VERSION: &str = "1.0.0";

/// The OCI layouts a run reads and writes. Clones share the write locks.
#[derive(Clone, Default)]
pub(crate) struct Layout {
    dirs: Arc<Mutex<HashMap<PathBuf, Arc<Dir>>>>,
}

/// One layout directory: its write lock, taken at the first write, and the mutex that orders
/// this run's rewrites of `index.json`.
pub(super) struct Dir {
    pub path: PathBuf,
    /// The repository as the user named it, for messages.
    pub shown: String,
    pub lock: tokio::sync::Mutex<Option<std::fs::File>>,
}

impl Layout {
    /// The directory of a layout repository, the same one for every call of the run.
    pub(super) fn dir(&self, repo: &Repo) -> Arc<Dir> {
        let path = PathBuf::from(repo.layout_path().unwrap_or_default());
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.entry(path.clone())
            .or_insert_with(|| {
                Arc::new(Dir {
                    shown: repo.to_string(),
                    path,
                    lock: tokio::sync::Mutex::new(None),
                })
            })
            .clone()
    }
}

impl Dir {
    /// The path of a blob; `None` for a digest that is not `sha256:<64 hex>` (which also keeps
    /// a crafted digest from naming a path outside `blobs/`).
    pub fn blob(&self, digest: &str) -> Option<PathBuf> {
        blob_path(&self.path, digest)
    }

    /// Whether the blob is in the layout.
    pub fn has(&self, digest: &str) -> bool {
        self.blob(digest).is_some_and(|p| p.is_file())
    }

    /// "there is no OCI image layout at PATH", for errors.
    pub fn absent(&self) -> String {
        format!(
            "there is no OCI image layout at {} (no oci-layout file)",
            self.path.display()
        )
    }
}

fn blob_path(root: &Path, digest: &str) -> Option<PathBuf> {
    is_sha256(digest).then(|| root.join("blobs/sha256").join(&digest[7..]))
}
