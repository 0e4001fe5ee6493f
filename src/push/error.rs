//! Why a push stopped; every tag is then where it was, unless the error says otherwise.

use crate::registry::RegistryError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The tag moved since it was read: someone else's push is not overwritten.
    #[error("{0}")]
    Moved(String),
    /// The digest map could not record the originals; no tag was moved.
    #[error("{0}")]
    Record(String),
    /// The registry serves something else than what was pushed.
    #[error("{0}")]
    Served(String),
    /// The plan has nothing to push.
    #[error("{0}")]
    Plan(String),
    /// A manifest to push or copy cannot be read.
    #[error(transparent)]
    Media(#[from] crate::media::Error),
    /// What was being done when the error happened.
    #[error("{context}: {error}")]
    Context { context: String, error: Box<Error> },
}

/// Adds what was being done to an error.
pub(crate) fn context<T>(r: Result<T, Error>, what: impl FnOnce() -> String) -> Result<T, Error> {
    r.map_err(|e| Error::Context {
        context: what(),
        error: Box::new(e),
    })
}
