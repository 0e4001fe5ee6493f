//! Reading a layout: manifests by tag or digest (checked against their digest and media
//! type) and blobs, streamed and verified as they are read.

use std::path::PathBuf;

use bytes::Bytes;
use oci_spec::distribution::Reference;
use serde_json::Value;
use tokio::io::AsyncReadExt;

use super::dir::{Dir, Layout};
use crate::digest::sha256;
use crate::media::{self, Descriptor, Document, MANIFEST_ACCEPT, MANIFEST_MAX_BYTES};
use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;
use crate::registry::store::{Chunks, Tally};

const GET: &str = "fetching manifest";
const FETCH: &str = "fetching blob";

impl Layout {
    pub(super) async fn read_manifest(&self, r: &Reference) -> Result<Document, Error> {
        let dir = self.dir(&Repo::of(r));
        let what = r.whole();
        let fail = |kind, detail: String| Error::new(kind, GET, &what, detail);
        let (digest, entry) = resolve(&dir, r, &what).await?;
        let path = dir.blob(&digest).ok_or_else(|| {
            fail(
                ErrorKind::Protocol,
                format!("index.json gives digest {digest:?}, not a sha256 digest"),
            )
        })?;
        let mut f = tokio::fs::File::open(&path).await.map_err(|e| {
            fail(
                ErrorKind::NotFound,
                format!("not found: blob {digest} ({e})"),
            )
        })?;
        let mut bytes = Vec::new();
        (&mut f)
            .take(MANIFEST_MAX_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| fail(ErrorKind::Io, format!("reading {}: {e}", path.display())))?;
        let actual = sha256(&bytes);
        if actual != digest {
            return Err(fail(
                ErrorKind::Integrity,
                format!("the layout's blob {digest} holds bytes with digest {actual}"),
            ));
        }
        let doc = Document::parse(bytes, "the manifest")
            .map_err(|e| Error::document("reading manifest", &what, e))?;
        if !MANIFEST_ACCEPT.contains(&doc.media_type.as_str()) {
            return Err(fail(
                ErrorKind::Protocol,
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
            return Err(fail(
                ErrorKind::Protocol,
                format!(
                    "index.json gives media type {m}, the document says {}",
                    doc.media_type
                ),
            ));
        }
        Ok(doc)
    }

    pub(super) async fn resolve_digest(&self, r: &Reference) -> Result<Option<String>, Error> {
        let dir = self.dir(&Repo::of(r));
        match (r.digest(), r.tag()) {
            (Some(d), _) => Ok(dir.has(d).then(|| d.to_owned())),
            (None, Some(t)) => Ok(dir
                .tagged(t)
                .await?
                .and_then(|e| e.get("digest").and_then(Value::as_str).map(str::to_owned))),
            (None, None) => Ok(None),
        }
    }

    pub(super) fn read_blob(&self, repo: &Repo, desc: &Descriptor) -> Chunks {
        let read = FileRead {
            path: self.dir(repo).blob(&desc.digest),
            what: format!("{repo}@{}", desc.digest),
            desc: desc.clone(),
            file: None,
            tally: Tally::new(),
            done: false,
        };
        Box::pin(futures_util::stream::unfold(read, |mut r| async move {
            let item = r.next().await?;
            Some((item, r))
        }))
    }
}

/// The digest `r` names in the layout, and the `index.json` entry of its tag.
async fn resolve(dir: &Dir, r: &Reference, what: &str) -> Result<(String, Option<Value>), Error> {
    let not_found = |detail: String| Error::new(ErrorKind::NotFound, GET, what, detail);
    match (r.digest(), r.tag()) {
        (Some(d), _) => Ok((d.to_owned(), None)),
        (None, Some(t)) => match dir.tagged(t).await? {
            Some(e) => {
                let d = e
                    .get("digest")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                Ok((d, Some(e)))
            }
            None if dir.index().await?.is_none() => {
                Err(not_found(format!("not found: {}", dir.absent())))
            }
            None => Err(not_found(
                "not found (no index.json entry has this org.opencontainers.image.ref.name)"
                    .to_owned(),
            )),
        },
        (None, None) => Err(Error::new(
            ErrorKind::Invalid,
            GET,
            what,
            "names no tag or digest",
        )),
    }
}

/// One blob file being read, hashed and counted.
struct FileRead {
    /// `None` when the digest is not a sha256 digest.
    path: Option<PathBuf>,
    what: String,
    desc: Descriptor,
    file: Option<tokio::fs::File>,
    tally: Tally,
    done: bool,
}

type Item = Option<Result<Bytes, Error>>;

impl FileRead {
    fn fail(&mut self, kind: ErrorKind, detail: String) -> Item {
        self.done = true;
        self.file = None;
        Some(Err(Error::new(kind, FETCH, &self.what, detail)))
    }

    /// The next chunk; `None` once the blob is read whole and verified, or after an error.
    async fn next(&mut self) -> Item {
        if self.done {
            return None;
        }
        if self.file.is_none() {
            if let Some(stop) = self.open().await {
                return stop;
            }
        }
        let mut buf = vec![0u8; 256 * 1024];
        let read = match self.file.as_mut() {
            Some(f) => f.read(&mut buf).await,
            None => Ok(0),
        };
        let n = match read {
            Ok(n) => n,
            Err(e) => return self.fail(ErrorKind::Io, format!("reading the layout's file: {e}")),
        };
        let size = self.desc.size;
        if n == 0 {
            if let Some(actual) = self.tally.mismatch(&self.desc.digest, Some(size)) {
                let detail = format!("digest mismatch: the layout holds {} bytes (the manifest says {size}) whose digest is {actual}", self.tally.bytes);
                return self.fail(ErrorKind::Integrity, detail);
            }
            return None;
        }
        buf.truncate(n);
        if !self.tally.add(&buf, Some(size)) {
            let detail =
                format!("the layout's file is longer than the {size} bytes the descriptor gives");
            return self.fail(ErrorKind::Integrity, detail);
        }
        Some(Ok(Bytes::from(buf)))
    }

    /// Opens the blob's file; `Some` when that ends the stream.
    async fn open(&mut self) -> Option<Item> {
        let Some(p) = &self.path else {
            let detail = format!("{:?} is not a sha256 digest", self.desc.digest);
            return Some(self.fail(ErrorKind::Invalid, detail));
        };
        match tokio::fs::File::open(p).await {
            Ok(f) => {
                self.file = Some(f);
                None
            }
            Err(e) => {
                let detail = if media::is_foreign(&self.desc) {
                    format!("not in the layout ({e}): it is a foreign, non-distributable layer (media type {}), which layouts need not hold", self.desc.media_type)
                } else {
                    format!("not in the layout: {} ({e})", p.display())
                };
                Some(self.fail(ErrorKind::NotFound, detail))
            }
        }
    }
}
