//! What `verify` checks images against, and what it finds: per platform and per image, every
//! problem named in one sentence.

use crate::patch::{Patch, Seen};
use crate::registry::RegistryError;
use crate::visible::Layers;

/// Why a check could not be made (a problem found is not an error: it is reported).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Provenance(#[from] crate::provenance::Error),
    #[error(transparent)]
    Map(#[from] crate::digest_map::Error),
    /// A layer could not be read to its end, or its digest or size is wrong.
    #[error(transparent)]
    Layers(#[from] crate::visible::Error),
    /// An appended layer could not be read.
    #[error("{0}")]
    Scan(String),
    #[error(transparent)]
    Media(#[from] crate::media::Error),
    /// A manifest, config or reference is not of the form it must have.
    #[error("{0}")]
    Invalid(String),
}

/// What a verify run checks images against: the patches asked for (each must be on every
/// image), every patch it knows (to check the others a label names), and the run's layers.
pub struct Checks {
    pub requested: Vec<Patch>,
    pub known: Vec<Patch>,
    pub layers: Layers,
    /// uv, for patches that resolve requirement lines: resolved again on the patched image,
    /// they must find nothing left to do.
    pub resolver: std::sync::Arc<crate::resolve::Resolver>,
}

impl Checks {
    pub(crate) fn find(&self, id: &str) -> Option<&Patch> {
        self.requested
            .iter()
            .chain(&self.known)
            .find(|p| p.meta().id == id)
    }
}

/// The outcome for one platform: what was found wrong (empty when it verifies).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlatformCheck {
    pub platform: String,
    pub digest: String,
    pub file: Option<String>,
    pub problems: Vec<String>,
    /// Where the image came from, as its provenance statements say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub made_from: Vec<String>,
    /// The file's digests as read here, for checking a provenance statement against them.
    #[serde(skip)]
    pub seen: Seen,
}

impl PlatformCheck {
    pub fn new(platform: String, digest: String) -> Self {
        PlatformCheck {
            platform,
            digest,
            file: None,
            problems: Vec::new(),
            made_from: Vec::new(),
            seen: Seen::default(),
        }
    }
}

/// One image's checks.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageCheck {
    pub reference: String,
    pub digest: String,
    pub problems: Vec<String>,
    pub platforms: Vec<PlatformCheck>,
}

impl ImageCheck {
    pub fn ok(&self) -> bool {
        self.problems.is_empty() && self.platforms.iter().all(|p| p.problems.is_empty())
    }

    /// The check as text for people: the image and each platform, ok or FAIL, with what
    /// differs and where each platform came from.
    pub fn text(&self) -> String {
        let mark = |ok: bool| if ok { "ok  " } else { "FAIL" };
        let mut out = format!("{} {}", mark(self.ok()), self.reference);
        for p in &self.problems {
            out.push_str(&format!("\n  - {p}"));
        }
        for p in &self.platforms {
            out.push_str(&format!(
                "\n  {} {:<16} {}",
                mark(p.problems.is_empty()),
                p.platform,
                p.file.as_deref().unwrap_or("")
            ));
            for x in &p.made_from {
                out.push_str(&format!("\n      made from {x}"));
            }
            for x in &p.problems {
                out.push_str(&format!("\n      - {x}"));
            }
        }
        out
    }
}
