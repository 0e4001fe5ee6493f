//! The resolver's one error: a line naming what uv could not do, credentials redacted.

/// Why a platform could not be resolved: one line, credentials redacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);
