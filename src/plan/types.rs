//! What a plan holds: per image and per platform, what was found, what each patch decided, and
//! the new layers, config, manifest and index to push. Computed without writing anything, so
//! `plan` shows exactly what `apply` pushes.

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::layer::NewLayer;
use crate::media::{Document, Kind};
use crate::patch::{Outcome, Patch};
use crate::registry::{Registry, RegistryError, Repo};
use crate::select::Platforms;
use crate::visible::Layers;

/// What every image of a run is planned with: the registry, the patches in the order given,
/// the permits bounding concurrent platform scans, the run's layer reader, and the layers it
/// has built (identical changes on several platforms are built once).
pub struct Run {
    pub reg: Arc<Registry>,
    pub patches: Vec<Patch>,
    pub scans: Arc<Semaphore>,
    pub layers: Layers,
    pub shared: Arc<crate::layer::Shared>,
    /// uv, for patches that resolve requirement lines per platform.
    pub resolver: Arc<crate::resolve::Resolver>,
}

/// Why an image could not be planned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A layer could not be read to its end, or its digest or size is wrong.
    #[error(transparent)]
    Layers(#[from] crate::visible::Error),
    /// A manifest, index or config is not what it says it is.
    #[error("{0}")]
    Image(String),
    #[error(transparent)]
    Media(#[from] crate::media::Error),
    /// A target tag the registry would refuse.
    #[error("{0}")]
    Tag(String),
    /// Building a new layer, config or manifest failed.
    #[error("{0}")]
    Build(String),
    /// A planning task ended without an answer.
    #[error("platform task failed: {0}")]
    Task(String),
}

/// The new objects of one patched platform, ready to push.
#[derive(Debug, Clone)]
pub struct NewImage {
    /// One layer per file patch applied, in order (none for a run of `env` patches only).
    pub layers: Vec<NewLayer>,
    pub config: Vec<u8>,
    pub config_digest: String,
    pub manifest: Document,
}

impl NewImage {
    /// Bytes of the new layers, config and manifest.
    pub fn bytes(&self) -> u64 {
        self.layers.iter().map(NewLayer::size).sum::<u64>()
            + (self.config.len() + self.manifest.bytes.len()) as u64
    }
}

/// One file a patch wrote or hid, with its sha256 before and after (for provenance).
#[derive(Debug, Clone)]
pub struct FileChange {
    pub path: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// What one patch decided for one platform.
#[derive(Debug, Clone)]
pub struct PatchStep {
    pub id: String,
    pub title: String,
    /// sha256 of the patch's definition.
    pub definition_digest: String,
    pub outcome: Outcome,
    pub reason: String,
    /// Index into [`NewImage::layers`] of the layer it added.
    pub layer: Option<usize>,
    pub files: Vec<FileChange>,
    /// What the patch may break without being refused (`Verdict::warnings`).
    pub warnings: Vec<String>,
    /// The wheels it installed (`Verdict::installed`).
    pub installed: Vec<crate::patch::InstalledWheel>,
}

/// One platform of an image.
#[derive(Debug, Clone)]
pub struct PlatformPlan {
    pub platform: String,
    pub original: Document,
    pub outcome: Outcome,
    pub reason: String,
    /// The warnings of its patches (each named by its patch when several ran).
    pub warnings: Vec<String>,
    pub file: Option<String>,
    pub version: Option<String>,
    pub shape: Option<String>,
    pub layers_scanned: usize,
    pub bytes_scanned: u64,
    pub new: Option<NewImage>,
    /// Each patch's decision, in the order applied.
    pub patches: Vec<PatchStep>,
    /// For a platform that already carries a patch: the original manifest digest its config
    /// label names, so a re-run knows the original even without the digest map.
    pub recorded_original: Option<String>,
}

impl PlatformPlan {
    /// A platform refused before any patch decided (the scan refused the image).
    pub fn refused(platform: String, original: Document, reason: String) -> Self {
        PlatformPlan::unread(platform, original, Outcome::Refused, reason)
    }

    /// A platform the selection leaves out (a matrix rule names other platforms): not read,
    /// and kept as it is in the new index.
    pub fn left_out(platform: String, original: Document, only: &Platforms) -> Self {
        let reason =
            format!("left as it is: not among the platforms selected for this tag ({only})");
        PlatformPlan::unread(platform, original, Outcome::NotAffected, reason)
    }

    fn unread(platform: String, original: Document, outcome: Outcome, reason: String) -> Self {
        PlatformPlan {
            platform,
            original,
            outcome,
            reason,
            warnings: Vec::new(),
            file: None,
            version: None,
            shape: None,
            layers_scanned: 0,
            bytes_scanned: 0,
            new: None,
            patches: Vec::new(),
            recorded_original: None,
        }
    }
}

/// One tag of the source and where its patched image goes.
#[derive(Debug, Clone)]
pub struct ImagePlan {
    pub source: Repo,
    pub tag: String,
    pub target: Repo,
    pub target_tag: String,
    pub original: Document,
    pub platforms: Vec<PlatformPlan>,
    /// The new index (or the new manifest for a single-manifest tag) when anything is patched.
    pub new_top: Option<Document>,
    /// Attestation children left out of the new index.
    pub dropped: Vec<String>,
    /// Per-platform companion tags (`<tag>-linux-amd64`) that point at a child of this image.
    pub companions: Vec<Companion>,
    pub outcome: Outcome,
    pub reason: String,
    /// For an image that already carries a patch: the original digest it names itself (the
    /// OCI index annotation, or a single manifest's config label); `None` when it cannot tell.
    pub recorded_original: Option<String>,
}

impl ImagePlan {
    /// Bytes of everything new: layers, configs, manifests and the new index.
    pub fn bytes_to_push(&self) -> u64 {
        let platforms: u64 = self
            .platforms
            .iter()
            .filter_map(|p| p.new.as_ref())
            .map(NewImage::bytes)
            .sum();
        let index = match (&self.new_top, self.original.kind()) {
            (Some(top), Some(Kind::Index(_))) => top.bytes.len() as u64,
            _ => 0,
        };
        platforms + index
    }

    /// Whether any companion tag of this image still has to move.
    pub fn companions_pending(&self) -> bool {
        self.companions.iter().any(Companion::pending)
    }

    /// Whether the target is another name than the source (another repository or tag).
    pub fn elsewhere(&self) -> bool {
        self.target != self.source || self.target_tag != self.tag
    }
}

/// A per-platform companion tag of a multi-arch tag; it follows its child when that is patched.
#[derive(Debug, Clone)]
pub struct Companion {
    pub platform: String,
    pub source_tag: String,
    pub target_tag: String,
    /// What the companion tag pointed at when read (the original child, or something else).
    pub current: String,
    pub original_digest: String,
    /// The patched child it should point at, when this platform was patched.
    pub patched: Option<Document>,
}

impl Companion {
    /// Whether this companion is this image's to move: it points at the original child, or
    /// already at the patched one.
    pub fn is_ours(&self) -> bool {
        self.patched
            .as_ref()
            .is_some_and(|p| self.current == self.original_digest || self.current == p.digest)
    }

    /// Whether it still has to move.
    pub fn pending(&self) -> bool {
        self.is_ours()
            && self
                .patched
                .as_ref()
                .is_some_and(|p| p.digest != self.current)
    }
}
