//! An OCI image layout directory (image-spec: `oci-layout`, `index.json`, `blobs/sha256/<hex>`)
//! as a [`Store`], after skopeo's `oci:` transport: a layout's tags are the
//! `org.opencontainers.image.ref.name` annotations of `index.json`'s entries.
//!
//! Writes are ordered so that a killed run never leaves `index.json` naming a missing blob:
//! every blob goes to a temporary file in the layout, is checked against its digest and size,
//! fsynced and renamed into `blobs/sha256/`; `index.json` is replaced the same way (temporary
//! file, fsync, rename, directory fsync), and only after every blob the tagged document names,
//! down to the layers of each child manifest, is found in the layout. One run at a time writes
//! a layout: the first write takes an exclusive lock on its `oci-layout` file (a file no writer
//! replaces) for the rest of the run, and a second run is refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use oci_spec::distribution::Reference;
use serde_json::{json, Value};
use sha2::Digest as _;
use tokio::io::AsyncReadExt;

mod write;

use write::{one, write_verified};

use super::store::{Chunks, Store};
use super::{Http, RegistryError, Repo};
use crate::digest::{is_sha256, sha256};
use crate::media::{self, Descriptor, Document, MANIFEST_ACCEPT, MANIFEST_MAX_BYTES};

/// The annotation that names a tag in `index.json`.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The only layout version there is.
const LAYOUT_VERSION: &str = "1.0.0";
/// `index.json` is read whole; a bound keeps a hostile one from filling memory.
const INDEX_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// The OCI layouts a run reads and writes. Clones share the write locks.
#[derive(Clone, Default)]
pub struct Layout {
    dirs: Arc<Mutex<HashMap<PathBuf, Arc<Dir>>>>,
}

/// One layout directory: its write lock, taken at the first write, and the mutex that orders
/// this run's rewrites of `index.json`.
struct Dir {
    path: PathBuf,
    shown: String,
    lock: tokio::sync::Mutex<Option<std::fs::File>>,
}

fn err(op: &'static str, what: &str, detail: impl Into<String>) -> RegistryError {
    RegistryError::new(op, what, detail, None)
}

/// The path of a blob in a layout; `None` for a digest that is not `sha256:<64 hex>` (which
/// also keeps a crafted digest from naming a path outside `blobs/`).
fn blob_path(root: &Path, digest: &str) -> Option<PathBuf> {
    is_sha256(digest).then(|| root.join("blobs/sha256").join(&digest[7..]))
}

impl Layout {
    fn dir(&self, repo: &Repo) -> Arc<Dir> {
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

    /// `index.json`, or `None` when there is no layout at the path (nothing there yet).
    async fn index(dir: &Dir) -> Result<Option<Value>, RegistryError> {
        let op = "reading OCI layout";
        let marker = match tokio::fs::read(dir.path.join("oci-layout")).await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if dir.path.join("index.json").exists() {
                    return Err(err(op, &dir.shown, "it has an index.json but no oci-layout file, so it is not an OCI image layout"));
                }
                return Ok(None);
            }
            Err(e) => return Err(err(op, &dir.shown, format!("reading oci-layout: {e}"))),
        };
        let version = serde_json::from_slice::<Value>(&marker)
            .ok()
            .and_then(|v| v.get("imageLayoutVersion")?.as_str().map(str::to_owned));
        if version.as_deref() != Some(LAYOUT_VERSION) {
            return Err(err(op, &dir.shown, format!("its oci-layout file gives imageLayoutVersion {version:?}; only {LAYOUT_VERSION:?} is known")));
        }
        let path = dir.path.join("index.json");
        let len = tokio::fs::metadata(&path)
            .await
            .map_err(|e| err(op, &dir.shown, format!("index.json: {e}")))?
            .len();
        if len > INDEX_MAX_BYTES {
            return Err(err(
                op,
                &dir.shown,
                format!("index.json is {len} bytes, over the {INDEX_MAX_BYTES} byte limit"),
            ));
        }
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| err(op, &dir.shown, format!("index.json: {e}")))?;
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| err(op, &dir.shown, format!("index.json is not JSON: {e}")))?;
        if !v.get("manifests").is_some_and(Value::is_array) {
            return Err(err(op, &dir.shown, "index.json has no manifests list"));
        }
        Ok(Some(v))
    }

    /// The descriptor `index.json` names `tag` with; two entries of one name that disagree are
    /// refused rather than one picked.
    async fn tagged(dir: &Dir, tag: &str) -> Result<Option<Value>, RegistryError> {
        let Some(index) = Self::index(dir).await? else {
            return Ok(None);
        };
        let mut found: Option<Value> = None;
        for e in index["manifests"].as_array().into_iter().flatten() {
            if e.pointer("/annotations")
                .and_then(|a| a.get(REF_NAME))
                .and_then(Value::as_str)
                != Some(tag)
            {
                continue;
            }
            match &found {
                Some(f) if f.get("digest") != e.get("digest") => {
                    return Err(err("reading OCI layout", &dir.shown, format!("index.json names two different manifests {tag:?}; refusing to pick one")));
                }
                _ => found = Some(e.clone()),
            }
        }
        Ok(found)
    }
}

impl Store for Layout {
    async fn manifest_get(&self, r: &Reference) -> Result<Document, RegistryError> {
        let dir = self.dir(&Http::repo_of(r));
        let what = r.whole();
        let op = "fetching manifest";
        let (digest, entry) = match (r.digest(), r.tag()) {
            (Some(d), _) => (d.to_owned(), None),
            (None, Some(t)) => match Self::tagged(&dir, t).await? {
                Some(e) => {
                    let d = e
                        .get("digest")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    (d, Some(e))
                }
                None if Self::index(&dir).await?.is_none() => {
                    return Err(err(
                        op,
                        &what,
                        format!(
                            "not found: there is no OCI image layout at {} (no oci-layout file)",
                            dir.path.display()
                        ),
                    ))
                }
                None => return Err(err(
                    op,
                    &what,
                    "not found (no index.json entry has this org.opencontainers.image.ref.name)",
                )),
            },
            (None, None) => return Err(err(op, &what, "names no tag or digest")),
        };
        let path = blob_path(&dir.path, &digest).ok_or_else(|| {
            err(
                op,
                &what,
                format!("index.json gives digest {digest:?}, not a sha256 digest"),
            )
        })?;
        let mut f = tokio::fs::File::open(&path)
            .await
            .map_err(|e| err(op, &what, format!("not found: blob {digest} ({e})")))?;
        let mut bytes = Vec::new();
        (&mut f)
            .take(MANIFEST_MAX_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| err(op, &what, format!("reading {}: {e}", path.display())))?;
        let actual = sha256(&bytes);
        if actual != digest {
            return Err(err(
                op,
                &what,
                format!("the layout's blob {digest} holds bytes with digest {actual}"),
            ));
        }
        let doc = Document::parse(bytes, "the manifest")
            .map_err(|e| err("reading manifest", &what, e.to_string()))?;
        if !MANIFEST_ACCEPT.contains(&doc.media_type.as_str()) {
            return Err(err(
                op,
                &what,
                format!(
                    "media type {:?} is not a manifest type; refusing to read it",
                    doc.media_type
                ),
            ));
        }
        let listed = entry
            .as_ref()
            .and_then(|e| e.get("mediaType"))
            .and_then(Value::as_str);
        if let Some(m) = listed.filter(|m| *m != doc.media_type) {
            return Err(err(
                op,
                &what,
                format!(
                    "index.json gives media type {m}, the document says {}",
                    doc.media_type
                ),
            ));
        }
        Ok(doc)
    }

    async fn manifest_digest(&self, r: &Reference) -> Result<Option<String>, RegistryError> {
        let dir = self.dir(&Http::repo_of(r));
        match (r.digest(), r.tag()) {
            (Some(d), _) => Ok(blob_path(&dir.path, d)
                .filter(|p| p.is_file())
                .map(|_| d.to_owned())),
            (None, Some(t)) => Ok(Self::tagged(&dir, t)
                .await?
                .and_then(|e| e.get("digest").and_then(Value::as_str).map(str::to_owned))),
            (None, None) => Ok(None),
        }
    }

    async fn manifest_put_answer(
        &self,
        r: &Reference,
        doc: &Document,
    ) -> Result<Option<String>, RegistryError> {
        let repo = Http::repo_of(r);
        let what = r.whole();
        let dir = self.writable(&repo).await?;
        if !MANIFEST_ACCEPT.contains(&doc.media_type.as_str()) {
            return Err(err(
                "pushing manifest",
                &what,
                format!("media type {:?} is not a manifest type", doc.media_type),
            ));
        }
        self.blob_put(&repo, &doc.digest, doc.bytes.clone()).await?;
        let Some(tag) = r.tag().filter(|_| r.digest().is_none()) else {
            return Ok(None);
        };
        let _order = dir.lock.lock().await;
        Self::check_complete(&dir, doc).await?;
        let mut index = Self::index(&dir)
            .await?
            .unwrap_or_else(|| json!({"schemaVersion": 2, "manifests": []}));
        let entry = json!({
            "mediaType": doc.media_type,
            "digest": doc.digest,
            "size": doc.bytes.len(),
            "annotations": { REF_NAME: tag },
        });
        let names = |e: &Value| {
            e.pointer("/annotations")
                .and_then(|a| a.get(REF_NAME))
                .and_then(Value::as_str)
                == Some(tag)
        };
        if let Some(list) = index.get_mut("manifests").and_then(Value::as_array_mut) {
            // The tag's entry is replaced where it stood; duplicates of the name go.
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
        Self::write_index(&dir, &index).await?;
        Ok(None)
    }

    async fn tags_list(&self, repo: &Repo) -> Result<Vec<String>, RegistryError> {
        let dir = self.dir(repo);
        let Some(index) = Self::index(&dir).await? else {
            return Err(err(
                "listing tags of",
                &dir.shown,
                format!(
                    "there is no OCI image layout at {} (no oci-layout file)",
                    dir.path.display()
                ),
            ));
        };
        let mut tags: Vec<String> = index["manifests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| {
                e.pointer("/annotations")?
                    .get(REF_NAME)?
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        tags.sort();
        tags.dedup();
        Ok(tags)
    }

    async fn referrers_get(
        &self,
        _repo: &Repo,
        _digest: &str,
    ) -> Result<Option<Document>, RegistryError> {
        // A layout has no referrers API: the referrers tag schema serves it.
        Ok(None)
    }

    async fn blob_exists(&self, repo: &Repo, digest: &str) -> Result<bool, RegistryError> {
        Ok(blob_path(&self.dir(repo).path, digest).is_some_and(|p| p.is_file()))
    }

    fn blob_chunks(&self, repo: &Repo, desc: &Descriptor) -> Chunks {
        let what = format!("{repo}@{}", desc.digest);
        let path = blob_path(&self.dir(repo).path, &desc.digest);
        let desc = desc.clone();
        let op = "fetching blob";
        struct St {
            file: Option<tokio::fs::File>,
            hasher: sha2::Sha256,
            read: u64,
            done: bool,
        }
        fn failed(mut st: St, e: RegistryError) -> Option<(Result<Bytes, RegistryError>, St)> {
            st.done = true;
            st.file = None;
            Some((Err(e), st))
        }
        let st = St {
            file: None,
            hasher: sha2::Sha256::new(),
            read: 0,
            done: false,
        };
        Box::pin(futures_util::stream::unfold(st, move |mut st| {
            let (what, path, desc) = (what.clone(), path.clone(), desc.clone());
            async move {
                if st.done {
                    return None;
                }
                if st.file.is_none() {
                    let Some(p) = &path else {
                        let e = err(
                            op,
                            &what,
                            format!("{:?} is not a sha256 digest", desc.digest),
                        );
                        return failed(st, e);
                    };
                    match tokio::fs::File::open(p).await {
                        Ok(f) => st.file = Some(f),
                        Err(e) => {
                            let detail = if media::is_foreign(&desc) {
                                format!("not in the layout ({e}): it is a foreign, non-distributable layer (media type {}), which layouts need not hold", desc.media_type)
                            } else {
                                format!("not in the layout: {} ({e})", p.display())
                            };
                            return failed(st, err(op, &what, detail));
                        }
                    }
                }
                let mut buf = vec![0u8; 256 * 1024];
                let read = match st.file.as_mut() {
                    Some(f) => f.read(&mut buf).await,
                    None => Ok(0),
                };
                let n = match read {
                    Ok(n) => n,
                    Err(e) => {
                        let e = err(op, &what, format!("reading the layout's file: {e}"));
                        return failed(st, e);
                    }
                };
                if n == 0 {
                    let actual = crate::digest::finish(std::mem::take(&mut st.hasher));
                    if actual != desc.digest || st.read != desc.size {
                        let detail = format!("digest mismatch: the layout holds {} bytes (the manifest says {}) whose digest is {actual}", st.read, desc.size);
                        return failed(st, err(op, &what, detail));
                    }
                    return None;
                }
                if st.read + n as u64 > desc.size {
                    let detail = format!(
                        "the layout's file is longer than the {} bytes the descriptor gives",
                        desc.size
                    );
                    return failed(st, err(op, &what, detail));
                }
                buf.truncate(n);
                st.read += n as u64;
                st.hasher.update(&buf);
                Some((Ok(Bytes::from(buf)), st))
            }
        }))
    }

    async fn blob_put(
        &self,
        repo: &Repo,
        digest: &str,
        bytes: Vec<u8>,
    ) -> Result<(), RegistryError> {
        let what = format!("{repo}@{digest}");
        let dir = self.writable(repo).await?;
        let dest = blob_path(&dir.path, digest)
            .ok_or_else(|| err("uploading blob", &what, "not a sha256 digest"))?;
        if dest.is_file() {
            return Ok(());
        }
        let size = bytes.len() as u64;
        write_verified(
            &dir.path,
            &dest,
            digest,
            Some(size),
            one(bytes),
            &what,
            "uploading blob",
        )
        .await
    }

    async fn blob_mount(&self, _target: &Repo, _source: &Repo, _digest: &str) -> bool {
        // Between two layouts the blob is streamed across and its digest checked on the way,
        // rather than hard-linked (an edit of one layout's file would show in the other).
        false
    }

    async fn blob_receive(
        &self,
        target: &Repo,
        desc: &Descriptor,
        what: &str,
        source: &(dyn Fn() -> Chunks + Send + Sync),
    ) -> Result<(), RegistryError> {
        let dir = self.writable(target).await?;
        let dest = blob_path(&dir.path, &desc.digest)
            .ok_or_else(|| err("copying blob", what, "not a sha256 digest"))?;
        if dest.is_file() {
            return Ok(());
        }
        write_verified(
            &dir.path,
            &dest,
            &desc.digest,
            Some(desc.size),
            source(),
            what,
            "copying blob",
        )
        .await
    }
}
