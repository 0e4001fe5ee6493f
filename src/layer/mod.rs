//! A new layer from a patch's changes: the builder ([`build_changes`], reproducible, refusing
//! contradicting changes), where its compressed bytes live ([`LayerBlob`]: memory, or a
//! temporary file for a big one) and the run's layers shared by identical changes ([`Shared`]).

mod blob;
mod build;
mod shared;
#[cfg(test)]
mod tests;

pub use blob::{LayerBlob, MEMORY_MAX};
pub use build::{build_changes, check_changes, LayerError, NewLayer};
pub use shared::Shared;
