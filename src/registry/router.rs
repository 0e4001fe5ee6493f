//! The [`Registry`] every command holds: it picks the store that serves a repository (the
//! registry client or the OCI layout store, by `Repo::layout_path`) and calls it through the
//! [`Store`] interface, so callers keep one API whatever the source and target are. What joins
//! two repositories (mounts, copies, across transports too) is decided here; a blob crossing
//! transports streams from one store into the other, never whole in memory.

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use oci_spec::distribution::Reference;
use tokio::io::AsyncRead;
use tokio_util::io::StreamReader;

use super::error::{Error, ErrorKind};
use super::http::Http;
use super::layout::Layout;
use super::repo::Repo;
use super::settings::Settings;
use super::store::{failed, Chunks, Store};
use crate::media::{Descriptor, Document};

/// One client for a run, whatever the repositories' transports: registries get the HTTP
/// client (connection pool, token cache, credentials, requests in flight), OCI layouts the
/// layout store (a lock per layout written).
#[derive(Clone)]
pub struct Registry {
    /// Absent when every repository of the run is a layout: no registry, no CA bundle needed.
    http: Option<Http>,
    layout: Layout,
    /// One writer at a time per tag that is read, extended and written back (a referrers tag
    /// several tags' artifacts attach to), shared by every clone.
    tag_writers: TagWriters,
}

/// The locks of [`Registry::tag_writer`], by `REPO:TAG`.
type TagWriters = std::sync::Arc<
    std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
>;

impl Registry {
    /// A client for the given repositories within `settings`: loopback registries over plain
    /// HTTP, others over TLS.
    pub fn new(repos: &[&Repo], settings: Settings) -> Result<Self, Error> {
        let http = if repos.iter().all(|r| r.layout_path().is_some()) && !repos.is_empty() {
            None
        } else {
            Some(Http::new(repos, settings)?)
        };
        Ok(Registry {
            http,
            layout: Layout::default(),
            tag_writers: TagWriters::default(),
        })
    }

    /// Holds the one right of this run to read, change and write back the tag `r` names:
    /// concurrent read-modify-writes of one tag would overwrite each other's change.
    pub async fn tag_writer(&self, r: &Reference) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut all = self
                .tag_writers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            all.entry(r.to_string()).or_default().clone()
        };
        lock.lock_owned().await
    }

    /// As [`Registry::new`] with the default settings and at most `max_requests` registry
    /// requests in flight at once.
    pub fn with_concurrency(repos: &[&Repo], max_requests: usize) -> Result<Self, Error> {
        Self::new(repos, Settings::default().with_max_requests(max_requests))
    }

    /// The registry client for `repo`, or `None` when it is a layout.
    fn remote(&self, repo: &Repo) -> Result<Option<&Http>, Error> {
        if repo.layout_path().is_some() {
            return Ok(None);
        }
        match &self.http {
            Some(h) => Ok(Some(h)),
            None => Err(Error::new(
                ErrorKind::Unsupported,
                "reaching",
                &repo.to_string(),
                "this run was set up for OCI layouts only",
            )),
        }
    }

    /// The store that serves `repo`.
    fn store(&self, repo: &Repo) -> Result<&dyn Store, Error> {
        Ok(match self.remote(repo)? {
            Some(h) => h,
            None => &self.layout,
        })
    }

    pub async fn manifest_get(&self, r: &Reference) -> Result<Document, Error> {
        self.store(&Repo::of(r))?.manifest_get(r).await
    }

    /// The digest a tag (or digest) resolves to now, or `None` when it does not exist.
    pub async fn manifest_digest(&self, r: &Reference) -> Result<Option<String>, Error> {
        self.store(&Repo::of(r))?.manifest_digest(r).await
    }

    /// Stores a manifest's exact bytes under a tag or digest, with its own media type.
    pub async fn manifest_put(&self, r: &Reference, doc: &Document) -> Result<(), Error> {
        self.manifest_put_answer(r, doc).await.map(|_| ())
    }

    /// [`Registry::manifest_put`], returning the `OCI-Subject` header of the answer (a registry
    /// that keeps referrers itself names the subject there; a layout never does).
    pub(crate) async fn manifest_put_answer(
        &self,
        r: &Reference,
        doc: &Document,
    ) -> Result<Option<String>, Error> {
        self.store(&Repo::of(r))?.manifest_put(r, doc).await
    }

    /// PUTs a manifest that carries a `subject` by digest; `Ok(true)` when the registry answered
    /// with `OCI-Subject` naming that subject, i.e. it keeps the referrers list itself.
    pub async fn manifest_put_with_subject(
        &self,
        repo: &Repo,
        doc: &Document,
        subject: &str,
    ) -> Result<bool, Error> {
        let subject_seen = self
            .manifest_put_answer(&repo.at_digest(&doc.digest), doc)
            .await?;
        Ok(subject_seen.as_deref() == Some(subject))
    }

    /// Every tag of a repository (a layout's `org.opencontainers.image.ref.name`s).
    pub async fn tags_list(&self, repo: &Repo) -> Result<Vec<String>, Error> {
        self.store(repo)?.tags_list(repo).await
    }

    /// The referrers of `digest` from the referrers API, or `None` when there is no such API
    /// (distribution 2.8, every OCI layout): the caller then reads the referrers tag schema.
    pub async fn referrers_get(
        &self,
        repo: &Repo,
        digest: &str,
    ) -> Result<Option<Document>, Error> {
        self.store(repo)?.referrers_get(repo, digest).await
    }

    pub async fn blob_exists(&self, repo: &Repo, digest: &str) -> Result<bool, Error> {
        self.store(repo)?.blob_exists(repo, digest).await
    }

    fn chunks(&self, repo: &Repo, desc: &Descriptor) -> Chunks {
        match self.store(repo) {
            Ok(s) => s.blob_chunks(repo, desc),
            Err(e) => failed(e),
        }
    }

    /// A blob, streamed and verified, with I/O errors, for readers.
    pub fn blob_stream(
        &self,
        repo: &Repo,
        desc: &Descriptor,
    ) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
        self.chunks(repo, desc).map_err(std::io::Error::other)
    }

    /// Streams a blob as an `AsyncRead`.
    ///
    /// The read (socket or file, sha256) runs in its own task and hands chunks over a bounded
    /// channel, so it proceeds on another core while the reader inflates; the channel bounds
    /// what is buffered to a few MiB.
    pub async fn blob_reader(
        &self,
        repo: &Repo,
        desc: &Descriptor,
    ) -> Result<impl AsyncRead + Send + Unpin + 'static, Error> {
        let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(16);
        let mut stream = Box::pin(self.blob_stream(repo, desc));
        tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                if tx.send(item).await.is_err() {
                    break; // the reader is gone
                }
            }
        });
        let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Ok(StreamReader::new(Box::pin(chunks)))
    }

    /// Reads a small blob (a config, the patch layer) whole, bounded and verified.
    pub async fn blob_get_small(
        &self,
        repo: &Repo,
        desc: &Descriptor,
        max: u64,
    ) -> Result<Vec<u8>, Error> {
        if desc.size > max {
            return Err(Error::new(
                ErrorKind::TooLarge,
                "fetching blob",
                &format!("{repo}@{}", desc.digest),
                format!("{} bytes is over the {max} byte limit", desc.size),
            ));
        }
        let mut out = Vec::with_capacity(desc.size as usize);
        let mut s = self.chunks(repo, desc);
        while let Some(chunk) = s.next().await {
            out.extend_from_slice(&chunk?);
        }
        // The stream checked size and digest before ending cleanly.
        Ok(out)
    }

    /// Uploads a blob this tool made.
    pub async fn blob_put(&self, repo: &Repo, digest: &str, bytes: Vec<u8>) -> Result<(), Error> {
        self.store(repo)?.blob_put(repo, digest, bytes).await
    }

    /// Uploads a blob this tool made that is too big for memory (a spooled layer), streamed
    /// from the readers `open` makes: one per attempt, so a retry reads it again from its start.
    /// The store checks the digest and size before the blob counts as stored.
    pub async fn blob_put_reader(
        &self,
        repo: &Repo,
        desc: &Descriptor,
        open: &(dyn Fn() -> Box<dyn std::io::Read + Send> + Sync),
    ) -> Result<(), Error> {
        let what = format!("{repo}@{}", desc.digest);
        let make = || read_chunks(open(), &what);
        self.store(repo)?
            .blob_receive(repo, desc, &what, &make)
            .await
    }

    /// Cross-repository mount on one registry; `false` when declined, between two layouts or
    /// across transports, and the caller copies instead. Between two layouts the blob is
    /// streamed across and its digest checked on the way, rather than hard-linked (an edit of
    /// one layout's file would show in the other).
    pub async fn blob_mount(&self, target: &Repo, source: &Repo, digest: &str) -> bool {
        match (self.remote(target), self.remote(source)) {
            (Ok(Some(h)), Ok(Some(_))) => h.blob_mount(target, source, digest).await,
            _ => false,
        }
    }

    /// Copies a blob between repositories, registries or layouts as one stream (never whole in
    /// memory), its digest and size checked on arrival.
    pub async fn blob_copy(
        &self,
        source: &Repo,
        target: &Repo,
        desc: &Descriptor,
    ) -> Result<(), Error> {
        if let (Some(h), Some(_)) = (self.remote(source)?, self.remote(target)?) {
            return h.blob_copy(source, target, desc).await;
        }
        let what = format!("{source}@{} to {target}", desc.digest);
        let make = || self.chunks(source, desc);
        self.store(target)?
            .blob_receive(target, desc, &what, &make)
            .await
    }
}

/// Bytes of a local reader handed on per chunk (1 MiB), each read on the blocking pool.
const READ_CHUNK: usize = 1 << 20;

/// A local reader's bytes as a blob stream: each chunk read on the blocking pool, so a disk
/// read never holds up a runtime worker; an error names the blob.
fn read_chunks(reader: Box<dyn std::io::Read + Send>, what: &str) -> Chunks {
    let what = what.to_owned();
    let chunks = futures_util::stream::unfold(Some(reader), move |state| {
        let what = what.clone();
        async move {
            let mut reader = state?;
            let read = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; READ_CHUNK];
                let mut n = 0;
                while n < buf.len() {
                    match reader.read(&mut buf[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                buf.truncate(n);
                Ok((reader, buf))
            })
            .await;
            let fail = |detail: String| Error::new(ErrorKind::Io, "reading blob", &what, detail);
            match read {
                Ok(Ok((_, buf))) if buf.is_empty() => None,
                Ok(Ok((reader, buf))) => Some((Ok(Bytes::from(buf)), Some(reader))),
                Ok(Err(e)) => Some((Err(fail(e.to_string())), None)),
                Err(e) => Some((Err(fail(e.to_string())), None)),
            }
        }
    });
    Box::pin(chunks)
}
