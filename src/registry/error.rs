//! What a failed registry or layout call says: one error type whose text names the operation,
//! its object and what went wrong, and whose [`ErrorKind`] lets callers decide without reading
//! the text.

/// The kind of a failure, for callers that act on it (retry, fall back, refuse).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The manifest, blob, tag or layout is not there (HTTP 404, a missing file or entry).
    NotFound,
    /// Authentication failed or is missing (HTTP 401, a token service that refused).
    Unauthorized,
    /// Authenticated, but not allowed (HTTP 403).
    Denied,
    /// A manifest names a blob the registry does not hold (`MANIFEST_BLOB_UNKNOWN`).
    BlobUnknown,
    /// An answer or a document is over its size limit.
    TooLarge,
    /// No byte within the idle timeout, or an answer past its deadline.
    Timeout,
    /// Bytes that are not what their digest or size says.
    Integrity,
    /// The connection failed or broke.
    Transport,
    /// A registry answer or a layout file that breaks the protocol or the format.
    Protocol,
    /// The registry answered an error status no other kind names (see [`Error::status`]).
    Status,
    /// Something this client does not do (an unknown layout version, OAuth identity tokens, a
    /// registry in a run set up for layouts only).
    Unsupported,
    /// The request itself is malformed (no tag or digest, a digest that is not sha256).
    Invalid,
    /// Reading or writing a local file failed.
    Io,
    /// Another run holds the layout's write lock.
    Locked,
    /// Credentials could not be read (an auth file, a credential helper).
    Credentials,
}

impl ErrorKind {
    /// The kind of a registry's error answer: its error codes first, then its status.
    pub(crate) fn of_answer(status: u16, codes: &[String]) -> Self {
        if codes.iter().any(|c| c == "MANIFEST_BLOB_UNKNOWN") {
            return ErrorKind::BlobUnknown;
        }
        match status {
            401 => ErrorKind::Unauthorized,
            403 => ErrorKind::Denied,
            404 => ErrorKind::NotFound,
            413 => ErrorKind::TooLarge,
            _ => ErrorKind::Status,
        }
    }
}

/// A registry or layout failure: what was being done, to what, and what went wrong.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op} {what}: {detail}")]
pub struct Error {
    kind: ErrorKind,
    op: &'static str,
    what: String,
    detail: String,
    status: Option<u16>,
}

/// The name callers have used for [`Error`].
pub type RegistryError = Error;

impl Error {
    pub(crate) fn new(
        kind: ErrorKind,
        op: &'static str,
        what: &str,
        detail: impl Into<String>,
    ) -> Self {
        Error {
            kind,
            op,
            what: what.to_owned(),
            detail: detail.into(),
            status: None,
        }
    }

    /// A document the registry or layout served is not what it must be (too large, not JSON,
    /// not a manifest, a bad descriptor).
    pub(crate) fn document(op: &'static str, what: &str, e: crate::media::Error) -> Self {
        let kind = match e.kind {
            crate::media::ErrorKind::TooLarge => ErrorKind::TooLarge,
            _ => ErrorKind::Protocol,
        };
        Error::new(kind, op, what, e.to_string())
    }

    /// The registry answered `status`, which the operation does not expect.
    pub(crate) fn unexpected(op: &'static str, what: &str, status: u16) -> Self {
        Error::new(
            ErrorKind::of_answer(status, &[]),
            op,
            what,
            format!("HTTP {status}"),
        )
        .with_status(status)
    }

    /// The same error, recording the HTTP status the registry answered.
    pub(crate) fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The HTTP status of the registry's answer, when there was one.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The operation that failed (`fetching manifest`, `uploading blob`, ...).
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// What the operation was on (a reference, a repository, a blob).
    pub fn what(&self) -> &str {
        &self.what
    }

    /// What went wrong, without the operation and its object.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// A failure below the operations (auth, credentials, a body read), before it is named by the
/// operation it ended: the caller adds its `op` and `what`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{detail}")]
pub(crate) struct Cause {
    pub kind: ErrorKind,
    pub detail: String,
}

impl Cause {
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Cause {
            kind,
            detail: detail.into(),
        }
    }

    /// The error of the operation this cause ended.
    pub fn during(self, op: &'static str, what: &str) -> Error {
        Error::new(self.kind, op, what, self.detail)
    }
}
