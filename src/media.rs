//! Media types and their two families (Docker v2 and OCI), and raw documents: the exact bytes a
//! registry served, their digest, and a JSON view for reading. Documents that do not change are
//! never re-serialised.

use serde_json::Value;

use crate::digest::sha256;

pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
pub const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
pub const OCI_LAYER_NONDIST_ZSTD: &str =
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd";
pub const DOCKER_LAYER_FOREIGN: &str = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip";
pub const OCI_LAYER_NONDIST_GZIP: &str =
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip";

/// Everything a manifest GET accepts: without the OCI index type, distribution answers 404 for
/// an OCI index ("OCI index found, but accept header does not support OCI indexes").
pub const MANIFEST_ACCEPT: &[&str] = &[OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST];

/// Registries refuse large manifests (distribution: 4 MiB); anything above is not a runner image.
pub const MANIFEST_MAX_BYTES: usize = 4 * 1024 * 1024;

/// Configs are small JSON; bound them so a hostile registry cannot exhaust memory.
pub const CONFIG_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// The most children an index may list. Every platform's manifest and plan are held until the
/// index is pushed (tens of KiB each), so a hostile index of many thousands would exhaust memory;
/// real multi-arch images list a handful.
pub const MAX_INDEX_CHILDREN: usize = 1024;

/// A manifest, index, config or descriptor that is not what it must be; the text names the
/// document (and JSON path) it is about.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub kind: ErrorKind,
    message: String,
}

/// What is wrong with a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Not JSON, or not of the form its media type says.
    Invalid,
    /// Over a limit this tool keeps (bytes of a manifest, children of an index).
    TooLarge,
}

impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Invalid,
            message: message.into(),
        }
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::TooLarge,
            message: message.into(),
        }
    }
}

/// Refuses an index with more children than [`MAX_INDEX_CHILDREN`].
pub fn check_index_children(doc: &Document, what: &str) -> Result<(), Error> {
    let n = doc
        .json
        .get("manifests")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    if n > MAX_INDEX_CHILDREN {
        return Err(Error::too_large(format!(
            "index {what} lists {n} manifests; more than {MAX_INDEX_CHILDREN} are refused (no multi-arch image has that many)"
        )));
    }
    Ok(())
}

/// Docker v2 or OCI: a new layer must use the family of the manifest it is added to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Docker,
    Oci,
}

impl Family {
    pub fn layer_gzip(self) -> &'static str {
        match self {
            Family::Docker => DOCKER_LAYER_GZIP,
            Family::Oci => OCI_LAYER_GZIP,
        }
    }
}

/// What a manifest document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Index(Family),
    Manifest(Family),
}

/// How a layer blob is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    /// zstd frames, skippable frames included (`zstd:chunked` keeps its table of contents in one).
    Zstd,
    None,
}

/// The compression a layer media type implies; `None` for types this tool cannot read.
pub fn layer_compression(media_type: &str) -> Option<Compression> {
    match media_type {
        DOCKER_LAYER_GZIP | OCI_LAYER_GZIP | DOCKER_LAYER_FOREIGN | OCI_LAYER_NONDIST_GZIP => {
            Some(Compression::Gzip)
        }
        OCI_LAYER_ZSTD | OCI_LAYER_NONDIST_ZSTD => Some(Compression::Zstd),
        OCI_LAYER_TAR | "application/vnd.oci.image.layer.nondistributable.v1.tar" => {
            Some(Compression::None)
        }
        _ => None,
    }
}

/// A manifest or index exactly as served, with its digest and a parsed view.
#[derive(Debug, Clone)]
pub struct Document {
    pub bytes: Vec<u8>,
    pub digest: String,
    pub media_type: String,
    pub json: Value,
}

impl Document {
    /// Parses served bytes; `what` names the document in errors.
    pub fn parse(bytes: Vec<u8>, what: &str) -> Result<Self, Error> {
        if bytes.len() > MANIFEST_MAX_BYTES {
            return Err(Error::too_large(format!(
                "{what} is {} bytes, over the {} byte limit for manifests",
                bytes.len(),
                MANIFEST_MAX_BYTES
            )));
        }
        let json: Value = serde_json::from_slice(&bytes).map_err(|e| {
            let head =
                String::from_utf8_lossy(&bytes[..bytes.len().min(40)]).replace(['\n', '\r'], " ");
            Error::invalid(format!("{what} is not JSON ({e}); it starts with {head:?}"))
        })?;
        if !json.is_object() {
            return Err(Error::invalid(format!("{what} is JSON but not an object")));
        }
        let media_type = match json.get("mediaType").and_then(Value::as_str) {
            Some(m) => m.to_owned(),
            // OCI allows omitting mediaType; infer from the fields that must be there.
            None if json.get("manifests").is_some() => OCI_INDEX.to_owned(),
            None if json.get("layers").is_some() => OCI_MANIFEST.to_owned(),
            None => {
                return Err(Error::invalid(format!(
                    "{what} has no mediaType and is neither an index nor a manifest"
                )))
            }
        };
        let digest = sha256(&bytes);
        Ok(Document {
            bytes,
            digest,
            media_type,
            json,
        })
    }

    /// A document this tool made: serialised once, digested over those exact bytes.
    pub fn from_value(json: Value, media_type: &str) -> Self {
        let bytes = serde_json::to_vec(&json).unwrap_or_default();
        let digest = sha256(&bytes);
        Document {
            bytes,
            digest,
            media_type: media_type.to_owned(),
            json,
        }
    }

    pub fn kind(&self) -> Option<Kind> {
        match self.media_type.as_str() {
            DOCKER_LIST => Some(Kind::Index(Family::Docker)),
            OCI_INDEX => Some(Kind::Index(Family::Oci)),
            DOCKER_MANIFEST => Some(Kind::Manifest(Family::Docker)),
            OCI_MANIFEST => Some(Kind::Manifest(Family::Oci)),
            _ => None,
        }
    }
}

/// A content descriptor read from a manifest, with the fields this tool needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    /// Where a foreign (non-distributable) layer says its bytes are served from.
    pub urls: Vec<String>,
}

impl Descriptor {
    /// Reads a descriptor; `where_` names the document and JSON path for errors.
    pub fn from_json(v: &Value, where_: &str) -> Result<Self, Error> {
        let digest = v
            .get("digest")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::invalid(format!("{where_}: descriptor has no digest")))?;
        if !crate::digest::is_sha256(digest) {
            return Err(Error::invalid(format!(
                "{where_}: digest {digest:?} is not a sha256 digest"
            )));
        }
        let size = v
            .get("size")
            .and_then(Value::as_u64)
            .ok_or_else(|| Error::invalid(format!("{where_}: descriptor has no size")))?;
        let media_type = v
            .get("mediaType")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let urls = v
            .get("urls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|u| u.as_str().map(str::to_owned))
            .collect();
        Ok(Descriptor {
            media_type,
            digest: digest.to_owned(),
            size,
            urls,
        })
    }
}

/// A foreign (non-distributable) layer: its media type says so or it names `urls`; registries
/// need not hold its bytes.
pub fn is_foreign(desc: &Descriptor) -> bool {
    desc.media_type.contains(".foreign.")
        || desc.media_type.contains(".nondistributable.")
        || !desc.urls.is_empty()
}

/// `os/architecture[/variant]` of an index entry, `None` when it has no platform.
pub fn platform_of(entry: &Value) -> Option<String> {
    let p = entry.get("platform")?;
    let os = p.get("os")?.as_str()?;
    let arch = p.get("architecture")?.as_str()?;
    Some(match p.get("variant").and_then(Value::as_str) {
        Some(v) if !v.is_empty() => format!("{os}/{arch}/{v}"),
        _ => format!("{os}/{arch}"),
    })
}

/// Attestation manifests (buildx provenance/SBOM) reference pre-patch digests; they are dropped.
pub fn is_attestation(entry: &Value) -> bool {
    let unknown = platform_of(entry).as_deref() == Some("unknown/unknown");
    let annotated = entry
        .get("annotations")
        .and_then(|a| a.get("vnd.docker.reference.type"))
        .and_then(Value::as_str)
        == Some("attestation-manifest");
    unknown || annotated
}
