//! The registry client as a [`Store`]: each distribution API operation once, in the file of
//! its concern (manifests, blobs, uploads, copies, tags, referrers), over the transport.
//!
//! Why not oci-client: it was the first choice and carried the first version of this tool, but
//! what release pipelines need from it is what it cannot do (see its documented limits in the
//! project notes): one token cannot hold pull on a mount's source and push on its target (Docker
//! Hub then refuses every mount), response headers are not exposed (no `Retry-After`, no
//! `Content-Type` or `Docker-Content-Digest` checks), a HEAD 404 and a 500 look alike, a 403 on an
//! expired token is not retried, and a broken blob download cannot resume. So requests are made
//! here with reqwest; references are still parsed by oci-spec.

use oci_spec::distribution::Reference;

mod blobs;
mod copy;
mod download;
mod manifests;
mod ranges;
mod referrers;
mod tags;
mod uploads;

use super::error::Error;
use super::repo::Repo;
use super::settings::Settings;
use super::store::{Chunks, Fut, Source, Store};
use super::transport::Transport;
use crate::media::{Descriptor, Document};

/// The registry client: one transport (connection pool, token cache, credentials, bounds)
/// for every registry of the run. Clones share it.
#[derive(Clone)]
pub(crate) struct Http {
    transport: Transport,
}

impl Http {
    pub fn new(repos: &[&Repo], settings: Settings) -> Result<Self, Error> {
        Ok(Http {
            transport: Transport::new(repos, settings)?,
        })
    }

    /// Cross-repository mount on one registry; `false` when the registry declined it.
    pub async fn blob_mount(&self, target: &Repo, source: &Repo, digest: &str) -> bool {
        copy::mount(&self.transport, target, source, digest).await
    }

    /// Copies a blob between repositories or registries as one stream.
    pub async fn blob_copy(
        &self,
        source: &Repo,
        target: &Repo,
        desc: &Descriptor,
    ) -> Result<(), Error> {
        copy::copy(&self.transport, source, target, desc).await
    }
}

impl Store for Http {
    fn manifest_get<'a>(&'a self, r: &'a Reference) -> Fut<'a, Document> {
        Box::pin(manifests::get(&self.transport, r))
    }
    fn manifest_digest<'a>(&'a self, r: &'a Reference) -> Fut<'a, Option<String>> {
        Box::pin(manifests::digest(&self.transport, r))
    }
    fn manifest_put<'a>(&'a self, r: &'a Reference, doc: &'a Document) -> Fut<'a, Option<String>> {
        Box::pin(manifests::put(&self.transport, r, doc))
    }
    fn tags_list<'a>(&'a self, repo: &'a Repo) -> Fut<'a, Vec<String>> {
        Box::pin(tags::list(&self.transport, repo))
    }
    fn referrers_get<'a>(&'a self, repo: &'a Repo, digest: &'a str) -> Fut<'a, Option<Document>> {
        Box::pin(referrers::get(&self.transport, repo, digest))
    }
    fn blob_exists<'a>(&'a self, repo: &'a Repo, digest: &'a str) -> Fut<'a, bool> {
        Box::pin(blobs::exists(&self.transport, repo, digest))
    }
    fn blob_chunks(&self, repo: &Repo, desc: &Descriptor) -> Chunks {
        if self.transport.ranges().applies_to(desc.size) {
            return Box::pin(ranges::chunks(&self.transport, repo, desc));
        }
        Box::pin(download::chunks(&self.transport, repo, desc, None))
    }
    fn blob_put<'a>(&'a self, repo: &'a Repo, digest: &'a str, bytes: Vec<u8>) -> Fut<'a, ()> {
        Box::pin(uploads::put(&self.transport, repo, digest, bytes))
    }
    fn blob_receive<'a>(
        &'a self,
        target: &'a Repo,
        desc: &'a Descriptor,
        what: &'a str,
        source: Source<'a>,
    ) -> Fut<'a, ()> {
        // A layout's file needs no request slot; the upload takes one.
        Box::pin(copy::send(
            &self.transport,
            target,
            desc,
            what,
            false,
            move |_| source(),
        ))
    }
}
