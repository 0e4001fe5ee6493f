//! The interface of a place that holds images (a registry, an OCI layout): what a command
//! needs from it, each operation once per store, called through `&dyn Store` by the router.
//!
//! Delete is not part of it: this tool never deletes. Cross-repository mounts and copies
//! between stores are the router's, since they join two stores.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::Stream;
use oci_spec::distribution::Reference;

use super::error::Error;
use super::repo::Repo;
use crate::media::{Descriptor, Document};

/// A blob's bytes as they are read, verified against its descriptor (digest and size) before
/// the stream ends cleanly.
pub(crate) type Chunks = Pin<Box<dyn Stream<Item = Result<Bytes, Error>> + Send + 'static>>;

/// A store's answer, to be awaited.
pub(crate) type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// Makes a blob's stream, again for each attempt of a transfer.
pub(crate) type Source<'a> = &'a (dyn Fn() -> Chunks + Send + Sync);

/// What a command needs from a place that holds images: manifests by tag or digest, blobs
/// (streamed), tags, and the referrers API.
pub(crate) trait Store: Send + Sync {
    /// A manifest or index by tag or digest, checked against the digest asked for.
    fn manifest_get<'a>(&'a self, r: &'a Reference) -> Fut<'a, Document>;
    /// The digest a tag or digest resolves to now; `None` when it does not exist.
    fn manifest_digest<'a>(&'a self, r: &'a Reference) -> Fut<'a, Option<String>>;
    /// Stores a manifest's exact bytes under a tag or digest; `Some(subject)` when the store
    /// keeps the referrers of that subject itself.
    fn manifest_put<'a>(&'a self, r: &'a Reference, doc: &'a Document) -> Fut<'a, Option<String>>;
    /// Every tag of a repository.
    fn tags_list<'a>(&'a self, repo: &'a Repo) -> Fut<'a, Vec<String>>;
    /// The referrers API's answer, `None` where there is none (the referrers tag schema then).
    fn referrers_get<'a>(&'a self, repo: &'a Repo, digest: &'a str) -> Fut<'a, Option<Document>>;
    fn blob_exists<'a>(&'a self, repo: &'a Repo, digest: &'a str) -> Fut<'a, bool>;
    /// A blob, streamed and verified.
    fn blob_chunks(&self, repo: &Repo, desc: &Descriptor) -> Chunks;
    /// Stores a blob this tool made.
    fn blob_put<'a>(&'a self, repo: &'a Repo, digest: &'a str, bytes: Vec<u8>) -> Fut<'a, ()>;
    /// Stores a blob read from another store, streamed: `source` makes the stream (again for a
    /// retry); the digest and size are checked before the blob counts as stored.
    fn blob_receive<'a>(
        &'a self,
        target: &'a Repo,
        desc: &'a Descriptor,
        what: &'a str,
        source: Source<'a>,
    ) -> Fut<'a, ()>;
}

/// A stream of one chunk.
pub(crate) fn one(bytes: Vec<u8>) -> Chunks {
    Box::pin(futures_util::stream::once(
        async move { Ok(Bytes::from(bytes)) },
    ))
}

/// A stream that fails at once.
pub(crate) fn failed(e: Error) -> Chunks {
    Box::pin(futures_util::stream::once(async { Err(e) }))
}

/// Counts and hashes a blob's bytes as they pass, refusing any beyond the expected size.
pub(crate) struct Tally {
    hasher: sha2::Sha256,
    /// Bytes counted so far.
    pub bytes: u64,
}

impl Tally {
    pub fn new() -> Self {
        Tally {
            hasher: sha2::Digest::new(),
            bytes: 0,
        }
    }

    /// Counts `chunk`; `false` (nothing counted) when it would take the total past `size`.
    pub fn add(&mut self, chunk: &[u8], size: Option<u64>) -> bool {
        let total = self.bytes + chunk.len() as u64;
        if size.is_some_and(|s| total > s) {
            return false;
        }
        self.bytes = total;
        sha2::Digest::update(&mut self.hasher, chunk);
        true
    }

    /// The digest of the bytes counted, when they are not `digest` or (when given) not `size`
    /// bytes; `None` when they are what was expected.
    pub fn mismatch(&mut self, digest: &str, size: Option<u64>) -> Option<String> {
        let actual =
            crate::digest::finish(std::mem::replace(&mut self.hasher, sha2::Digest::new()));
        (actual != digest || size.is_some_and(|s| s != self.bytes)).then_some(actual)
    }
}
