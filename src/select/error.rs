//! Why a selection of tags could not be made; every error but a registry's comes before any
//! request.

use crate::registry::RegistryError;

/// Why the tags of a run could not be selected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A matrix file that cannot be read, does not parse, or holds a rule that gives no tag;
    /// the text names the file and the rule.
    #[error("{0}")]
    Matrix(String),
    /// A choice of tags that cannot be honoured: a tag of another backend or one the matrix
    /// does not give, a target name the registry would refuse, a bad shard.
    #[error("{0}")]
    Request(String),
    /// Listing the repository's tags failed.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}
