//! Where images come from and go to: one interface ([`Store`]) with two implementations, the
//! registry client ([`Http`]) and an OCI image layout directory ([`Layout`]), and the
//! [`Registry`] every command holds, which routes each call by the repository's transport
//! (`Repo::layout_path`). Callers keep one API whatever the source and target are; a blob
//! crossing transports streams from one store into the other, never whole in memory.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use oci_spec::distribution::Reference;
use tokio::io::AsyncRead;
use tokio_util::io::StreamReader;

use super::layout::Layout;
use super::transport::limits;
use super::{Http, RegistryError, Repo};
use crate::media::{Descriptor, Document};

/// A blob's bytes as they are read, verified against its descriptor (digest and size) before
/// the stream ends cleanly.
pub type Chunks = Pin<Box<dyn Stream<Item = Result<Bytes, RegistryError>> + Send + 'static>>;

/// What a command needs from a place that holds images: manifests by tag or digest, blobs
/// (streamed), tags, and the two referrers calls. Delete is not part of it: this tool never
/// deletes.
pub trait Store: Send + Sync {
    /// A manifest or index by tag or digest, checked against the digest asked for.
    fn manifest_get(
        &self,
        r: &Reference,
    ) -> impl Future<Output = Result<Document, RegistryError>> + Send;
    /// The digest a tag or digest resolves to now; `None` when it does not exist.
    fn manifest_digest(
        &self,
        r: &Reference,
    ) -> impl Future<Output = Result<Option<String>, RegistryError>> + Send;
    /// Stores a manifest's exact bytes under a tag or digest; `Some(subject)` when the store
    /// keeps the referrers of that subject itself.
    fn manifest_put_answer(
        &self,
        r: &Reference,
        doc: &Document,
    ) -> impl Future<Output = Result<Option<String>, RegistryError>> + Send;
    /// Every tag of a repository.
    fn tags_list(
        &self,
        repo: &Repo,
    ) -> impl Future<Output = Result<Vec<String>, RegistryError>> + Send;
    /// The referrers API's answer, `None` where there is none (the referrers tag schema then).
    fn referrers_get(
        &self,
        repo: &Repo,
        digest: &str,
    ) -> impl Future<Output = Result<Option<Document>, RegistryError>> + Send;
    fn blob_exists(
        &self,
        repo: &Repo,
        digest: &str,
    ) -> impl Future<Output = Result<bool, RegistryError>> + Send;
    /// A blob, streamed and verified.
    fn blob_chunks(&self, repo: &Repo, desc: &Descriptor) -> Chunks;
    /// Stores a blob this tool made.
    fn blob_put(
        &self,
        repo: &Repo,
        digest: &str,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Result<(), RegistryError>> + Send;
    /// Makes a blob of `source` (same store kind) present in `target` without moving it through
    /// this process where the store can; `false` when it could not (the caller copies).
    fn blob_mount(
        &self,
        target: &Repo,
        source: &Repo,
        digest: &str,
    ) -> impl Future<Output = bool> + Send;
    /// Stores a blob read from another store, streamed: `source` makes the stream (again for a
    /// retry); the digest and size are checked before the blob counts as stored.
    fn blob_receive(
        &self,
        target: &Repo,
        desc: &Descriptor,
        what: &str,
        source: &(dyn Fn() -> Chunks + Send + Sync),
    ) -> impl Future<Output = Result<(), RegistryError>> + Send;
}

/// One client for a run, whatever the repositories' transports: registries get the HTTP
/// client (connection pool, token cache, credentials, requests in flight), OCI layouts the
/// layout store (a lock per layout written).
#[derive(Clone)]
pub struct Registry {
    /// Absent when every repository of the run is a layout: no registry, no CA bundle needed.
    http: Option<Http>,
    layout: Layout,
}

/// Which store serves a repository.
enum Via<'a> {
    Http(&'a Http),
    Layout(&'a Layout),
}

impl Registry {
    /// A client for the given repositories: loopback registries over plain HTTP, others over
    /// TLS; at most the configured number of requests in flight.
    pub fn new(repos: &[&Repo]) -> Result<Self, RegistryError> {
        Self::with_concurrency(repos, limits().max_requests)
    }

    /// As [`Registry::new`], with at most `max_requests` registry requests in flight at once.
    pub fn with_concurrency(repos: &[&Repo], max_requests: usize) -> Result<Self, RegistryError> {
        let http = if repos.iter().all(|r| r.layout_path().is_some()) && !repos.is_empty() {
            None
        } else {
            Some(Http::with_concurrency(repos, max_requests)?)
        };
        Ok(Registry {
            http,
            layout: Layout::default(),
        })
    }

    fn via(&self, repo: &Repo) -> Result<Via<'_>, RegistryError> {
        if repo.layout_path().is_some() {
            return Ok(Via::Layout(&self.layout));
        }
        match &self.http {
            Some(h) => Ok(Via::Http(h)),
            None => Err(RegistryError::new(
                "reaching",
                &repo.to_string(),
                "this run was set up for OCI layouts only",
                None,
            )),
        }
    }

    fn via_ref(&self, r: &Reference) -> Result<Via<'_>, RegistryError> {
        self.via(&Http::repo_of(r))
    }

    pub async fn manifest_get(&self, r: &Reference) -> Result<Document, RegistryError> {
        match self.via_ref(r)? {
            Via::Http(h) => Store::manifest_get(h, r).await,
            Via::Layout(l) => l.manifest_get(r).await,
        }
    }

    /// The digest a tag (or digest) resolves to now, or `None` when it does not exist.
    pub async fn manifest_digest(&self, r: &Reference) -> Result<Option<String>, RegistryError> {
        match self.via_ref(r)? {
            Via::Http(h) => Store::manifest_digest(h, r).await,
            Via::Layout(l) => l.manifest_digest(r).await,
        }
    }

    /// Stores a manifest's exact bytes under a tag or digest, with its own media type.
    pub async fn manifest_put(&self, r: &Reference, doc: &Document) -> Result<(), RegistryError> {
        self.manifest_put_answer(r, doc).await.map(|_| ())
    }

    /// [`Registry::manifest_put`], returning the `OCI-Subject` header of the answer (a registry
    /// that keeps referrers itself names the subject there; a layout never does).
    pub(crate) async fn manifest_put_answer(
        &self,
        r: &Reference,
        doc: &Document,
    ) -> Result<Option<String>, RegistryError> {
        match self.via_ref(r)? {
            Via::Http(h) => {
                // Distribution answers MANIFEST_BLOB_UNKNOWN for a moment while another client
                // commits the same blob (two runs patching one tag at once); every blob was
                // confirmed before this PUT, so the answer is retried a few times before it
                // is believed.
                let mut pause = std::time::Duration::from_millis(200);
                let mut attempt = 1;
                loop {
                    match Store::manifest_put_answer(h, r, doc).await {
                        Err(e)
                            if attempt < 4
                                && e.status == Some(400)
                                && e.detail.contains("MANIFEST_BLOB_UNKNOWN") =>
                        {
                            tracing::debug!("{e}; retrying in {pause:?}");
                            tokio::time::sleep(pause).await;
                            pause *= 2;
                            attempt += 1;
                        }
                        other => return other,
                    }
                }
            }
            Via::Layout(l) => l.manifest_put_answer(r, doc).await,
        }
    }

    /// Every tag of a repository (a layout's `org.opencontainers.image.ref.name`s).
    pub async fn tags_list(&self, repo: &Repo) -> Result<Vec<String>, RegistryError> {
        match self.via(repo)? {
            Via::Http(h) => Store::tags_list(h, repo).await,
            Via::Layout(l) => l.tags_list(repo).await,
        }
    }

    /// The referrers of `digest` from the referrers API, or `None` when there is no such API
    /// (distribution 2.8, every OCI layout): the caller then reads the referrers tag schema.
    pub async fn referrers_get(
        &self,
        repo: &Repo,
        digest: &str,
    ) -> Result<Option<Document>, RegistryError> {
        match self.via(repo)? {
            Via::Http(h) => Store::referrers_get(h, repo, digest).await,
            Via::Layout(l) => l.referrers_get(repo, digest).await,
        }
    }

    pub async fn blob_exists(&self, repo: &Repo, digest: &str) -> Result<bool, RegistryError> {
        match self.via(repo)? {
            Via::Http(h) => Store::blob_exists(h, repo, digest).await,
            Via::Layout(l) => l.blob_exists(repo, digest).await,
        }
    }

    fn chunks(&self, repo: &Repo, desc: &Descriptor) -> Chunks {
        match self.via(repo) {
            Ok(Via::Http(h)) => Store::blob_chunks(h, repo, desc),
            Ok(Via::Layout(l)) => l.blob_chunks(repo, desc),
            Err(e) => Box::pin(futures_util::stream::once(async { Err(e) })),
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
    ) -> Result<impl AsyncRead + Send + Unpin + 'static, RegistryError> {
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
    ) -> Result<Vec<u8>, RegistryError> {
        if desc.size > max {
            return Err(RegistryError::new(
                "fetching blob",
                &format!("{repo}@{}", desc.digest),
                format!("{} bytes is over the {max} byte limit", desc.size),
                None,
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
    pub async fn blob_put(
        &self,
        repo: &Repo,
        digest: &str,
        bytes: Vec<u8>,
    ) -> Result<(), RegistryError> {
        match self.via(repo)? {
            Via::Http(h) => Store::blob_put(h, repo, digest, bytes).await,
            Via::Layout(l) => l.blob_put(repo, digest, bytes).await,
        }
    }

    /// Cross-repository mount (one registry) or link (two layouts); `false` when declined or
    /// across transports, and the caller copies instead.
    pub async fn blob_mount(&self, target: &Repo, source: &Repo, digest: &str) -> bool {
        match (self.via(target), self.via(source)) {
            (Ok(Via::Http(h)), Ok(Via::Http(_))) => {
                Store::blob_mount(h, target, source, digest).await
            }
            (Ok(Via::Layout(l)), Ok(Via::Layout(_))) => l.blob_mount(target, source, digest).await,
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
    ) -> Result<(), RegistryError> {
        let what = format!("{source}@{} to {target}", desc.digest);
        match (self.via(source)?, self.via(target)?) {
            (Via::Http(h), Via::Http(_)) => h.blob_copy(source, target, desc).await,
            (_, Via::Http(h)) => {
                let make = || self.chunks(source, desc);
                Store::blob_receive(h, target, desc, &what, &make).await
            }
            (_, Via::Layout(l)) => {
                let make = || self.chunks(source, desc);
                l.blob_receive(target, desc, &what, &make).await
            }
        }
    }
}

impl Store for Http {
    fn manifest_get(
        &self,
        r: &Reference,
    ) -> impl Future<Output = Result<Document, RegistryError>> + Send {
        Http::manifest_get(self, r)
    }
    fn manifest_digest(
        &self,
        r: &Reference,
    ) -> impl Future<Output = Result<Option<String>, RegistryError>> + Send {
        Http::manifest_digest(self, r)
    }
    fn manifest_put_answer(
        &self,
        r: &Reference,
        doc: &Document,
    ) -> impl Future<Output = Result<Option<String>, RegistryError>> + Send {
        Http::manifest_put_answer(self, r, doc)
    }
    fn tags_list(
        &self,
        repo: &Repo,
    ) -> impl Future<Output = Result<Vec<String>, RegistryError>> + Send {
        Http::tags_list(self, repo)
    }
    fn referrers_get(
        &self,
        repo: &Repo,
        digest: &str,
    ) -> impl Future<Output = Result<Option<Document>, RegistryError>> + Send {
        Http::referrers_get(self, repo, digest)
    }
    fn blob_exists(
        &self,
        repo: &Repo,
        digest: &str,
    ) -> impl Future<Output = Result<bool, RegistryError>> + Send {
        Http::blob_exists(self, repo, digest)
    }
    fn blob_chunks(&self, repo: &Repo, desc: &Descriptor) -> Chunks {
        Box::pin(Http::blob_chunks(self, repo, desc, None))
    }
    fn blob_put(
        &self,
        repo: &Repo,
        digest: &str,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Result<(), RegistryError>> + Send {
        Http::blob_put(self, repo, digest, bytes)
    }
    fn blob_mount(
        &self,
        target: &Repo,
        source: &Repo,
        digest: &str,
    ) -> impl Future<Output = bool> + Send {
        Http::blob_mount(self, target, source, digest)
    }
    async fn blob_receive(
        &self,
        target: &Repo,
        desc: &Descriptor,
        what: &str,
        source: &(dyn Fn() -> Chunks + Send + Sync),
    ) -> Result<(), RegistryError> {
        // A layout's file needs no request slot; the upload takes one.
        self.blob_send(target, desc, what, false, |_| source())
            .await
    }
}
