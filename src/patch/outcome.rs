//! The four outcomes every decision ends in, for one patch, one platform or one image; the
//! digest map records them as today's strings (`not-affected`, `already-patched`, `patched`,
//! `refused`), so pipelines reading the map see no change.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Ordered from "nothing to do" to "stop": the outcome of several decisions together is the
/// greatest of theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    NotAffected,
    AlreadyPatched,
    Patched,
    Refused,
}

impl Outcome {
    /// The name the digest map, the summary and `--json` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::NotAffected => "not-affected",
            Outcome::AlreadyPatched => "already-patched",
            Outcome::Patched => "patched",
            Outcome::Refused => "refused",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
