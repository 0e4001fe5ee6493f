//! The layout as a [`Store`]: each operation of the interface, served by the read, write and
//! tag sides.

use oci_spec::distribution::Reference;

use super::dir::Layout;
use crate::media::{Descriptor, Document};
use crate::registry::repo::Repo;
use crate::registry::store::{Chunks, Fut, Source, Store};

impl Store for Layout {
    fn manifest_get<'a>(&'a self, r: &'a Reference) -> Fut<'a, Document> {
        Box::pin(self.read_manifest(r))
    }
    fn manifest_digest<'a>(&'a self, r: &'a Reference) -> Fut<'a, Option<String>> {
        Box::pin(self.resolve_digest(r))
    }
    fn manifest_put<'a>(&'a self, r: &'a Reference, doc: &'a Document) -> Fut<'a, Option<String>> {
        Box::pin(self.tag_manifest(r, doc))
    }
    fn tags_list<'a>(&'a self, repo: &'a Repo) -> Fut<'a, Vec<String>> {
        Box::pin(async move { self.dir(repo).tags().await })
    }
    fn referrers_get<'a>(&'a self, _repo: &'a Repo, _digest: &'a str) -> Fut<'a, Option<Document>> {
        // A layout has no referrers API: the referrers tag schema serves it.
        Box::pin(async { Ok(None) })
    }
    fn blob_exists<'a>(&'a self, repo: &'a Repo, digest: &'a str) -> Fut<'a, bool> {
        Box::pin(async move { Ok(self.dir(repo).has(digest)) })
    }
    fn blob_chunks(&self, repo: &Repo, desc: &Descriptor) -> Chunks {
        self.read_blob(repo, desc)
    }
    fn blob_put<'a>(&'a self, repo: &'a Repo, digest: &'a str, bytes: Vec<u8>) -> Fut<'a, ()> {
        Box::pin(self.write_blob(repo, digest, bytes))
    }
    fn blob_receive<'a>(
        &'a self,
        target: &'a Repo,
        desc: &'a Descriptor,
        what: &'a str,
        source: Source<'a>,
    ) -> Fut<'a, ()> {
        Box::pin(self.receive_blob(target, desc, what, source))
    }
}
