//! Why attaching, finding or checking provenance failed.

use crate::registry::RegistryError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A referrer, statement or artifact is not of the form this tool reads or writes.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Media(#[from] crate::media::Error),
    /// Writing a statement file (`--provenance-dir`) failed.
    #[error("{0}")]
    Io(String),
}
