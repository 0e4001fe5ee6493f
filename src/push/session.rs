//! One push's traffic: where blobs and manifests come from and go to, what was already made
//! present (each blob once), and the report of what was sent.

use std::collections::HashSet;

use crate::layer::NewLayer;
use crate::media::{Descriptor, Document};
use crate::push::error::Error;
use crate::registry::{Registry, Repo};

/// What a push did, for the report and the digest map.
#[derive(Debug, Clone, Default)]
pub struct PushReport {
    pub blobs_uploaded: usize,
    pub blobs_mounted: usize,
    pub blobs_copied: usize,
    pub blobs_skipped: usize,
    pub bytes_uploaded: u64,
    pub manifests_pushed: usize,
    pub tag_moved: bool,
    /// Companion tags moved to their patched child.
    pub companions_moved: Vec<String>,
}

/// The state of one push from `source` into `target`.
pub(crate) struct Session<'a> {
    pub reg: &'a Registry,
    pub source: &'a Repo,
    pub target: &'a Repo,
    seen: HashSet<String>,
    pub rep: PushReport,
}

impl<'a> Session<'a> {
    pub fn new(reg: &'a Registry, source: &'a Repo, target: &'a Repo) -> Self {
        Session {
            reg,
            source,
            target,
            seen: HashSet::new(),
            rep: PushReport::default(),
        }
    }

    /// Makes one blob of the source present in the target: skip, mount, or stream it across.
    pub async fn ensure_blob(&mut self, desc: &Descriptor) -> Result<(), Error> {
        let (reg, source, target) = (self.reg, self.source, self.target);
        if !self.seen.insert(desc.digest.clone()) {
            return Ok(());
        }
        if reg.blob_exists(target, &desc.digest).await? {
            self.rep.blobs_skipped += 1;
            return Ok(());
        }
        if source.registry == target.registry
            && source.repository != target.repository
            && reg.blob_mount(target, source, &desc.digest).await
        {
            self.rep.blobs_mounted += 1;
            return Ok(());
        }
        reg.blob_copy(source, target, desc).await?;
        self.rep.blobs_copied += 1;
        Ok(())
    }

    /// Uploads a blob this tool made, unless the target has it.
    pub async fn put_new_blob(&mut self, digest: &str, bytes: &[u8]) -> Result<(), Error> {
        if !self.seen.insert(digest.to_owned()) {
            return Ok(());
        }
        if self.reg.blob_exists(self.target, digest).await? {
            self.rep.blobs_skipped += 1;
            return Ok(());
        }
        self.reg
            .blob_put(self.target, digest, bytes.to_vec())
            .await?;
        self.rep.blobs_uploaded += 1;
        self.rep.bytes_uploaded += bytes.len() as u64;
        Ok(())
    }

    /// Uploads a layer this tool built, unless the target has it: from memory, or streamed
    /// from its temporary file.
    pub async fn put_new_layer(&mut self, layer: &NewLayer) -> Result<(), Error> {
        let Some(blob) = layer.blob.in_memory() else {
            return self.put_spooled(layer).await;
        };
        self.put_new_blob(&layer.digest, blob).await
    }

    async fn put_spooled(&mut self, layer: &NewLayer) -> Result<(), Error> {
        if !self.seen.insert(layer.digest.clone()) {
            return Ok(());
        }
        if self.reg.blob_exists(self.target, &layer.digest).await? {
            self.rep.blobs_skipped += 1;
            return Ok(());
        }
        let desc = Descriptor {
            media_type: layer.media_type.clone(),
            digest: layer.digest.clone(),
            size: layer.size(),
            urls: Vec::new(),
        };
        let open = || layer.blob.reader();
        self.reg.blob_put_reader(self.target, &desc, &open).await?;
        self.rep.blobs_uploaded += 1;
        self.rep.bytes_uploaded += layer.size();
        Ok(())
    }

    /// PUTs a manifest by digest unless the target already has it.
    pub async fn put_manifest(&mut self, doc: &Document) -> Result<(), Error> {
        let at = self.target.at_digest(&doc.digest);
        if self.reg.manifest_digest(&at).await?.as_deref() == Some(doc.digest.as_str()) {
            return Ok(());
        }
        self.reg.manifest_put(&at, doc).await?;
        self.rep.manifests_pushed += 1;
        Ok(())
    }

    /// Copies a manifest of the source (every blob it names, then itself) as it is.
    pub async fn copy_manifest(&mut self, doc: &Document) -> Result<(), Error> {
        for d in descriptors(doc)? {
            self.ensure_blob(&d).await?;
        }
        self.put_manifest(doc).await
    }
}

/// The config and layer descriptors of a manifest.
pub(crate) fn descriptors(doc: &Document) -> Result<Vec<Descriptor>, Error> {
    let m = crate::image::Manifest::parse(doc, &doc.digest)?;
    Ok(m.blobs().cloned().collect())
}
