//! Errors of the digest map: where it cannot be written, who holds it, and what it holds.

/// A digest map error; the text names the file.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The map cannot be written where asked (a folder, a missing folder, a failed probe).
    #[error("{0}")]
    Unwritable(String),
    /// Another run holds the map's lock.
    #[error("{0}")]
    Locked(String),
    /// The map on disk records another patch.
    #[error("{0}")]
    OtherPatch(String),
    /// Reading or writing the file failed.
    #[error("{0}")]
    Io(String),
    /// The file, or a reference in it, is not valid.
    #[error("{0}")]
    Invalid(String),
    /// Two maps being joined record the same tag.
    #[error("{0}")]
    Conflict(String),
}
