//! Errors of the patch module: a patch folder that cannot be loaded (named by file and line), a
//! patch that is not known, or a tree that cannot be read. Callers match on the kind; the text
//! is the one sentence shown to people.

/// What went wrong, for callers that act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `patch.toml` (or a file it names) is not valid TOML, or not of its kind's form.
    Syntax,
    /// A value is of the right form but not acceptable (an id, a path, a version range).
    Invalid,
    /// A file of a patch folder, or of an unpacked tree, cannot be read or written.
    Io,
    /// No patch with that id, or no such kind.
    Unknown,
    /// Two patches of one run share an id, or too many patches for a command.
    Conflict,
}

/// A patch error: its kind and the sentence that names the file (and line) it is about.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub kind: ErrorKind,
    message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// The same error with `prefix` before its message (`--patch DIR: ...`).
    pub fn context(self, prefix: &str) -> Self {
        Error {
            kind: self.kind,
            message: format!("{prefix}{}", self.message),
        }
    }
}
