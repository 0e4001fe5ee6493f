//! Which tags a run patches, and which platforms of each: one selection that `--tag`, the
//! runner project's `matrix.yaml` (`--matrix`) and discovery all feed ([`selection`]), the
//! matrix read and checked ([`matrix`]), the platforms a rule names ([`Platforms`]) and a
//! shard's share of the tags ([`shard`]). All of it but discovery is decided before any
//! registry request.

mod error;
pub mod matrix;
mod platforms;
pub mod selection;
pub mod shard;
#[cfg(test)]
mod tests;

pub use error::Error;
pub use matrix::{Matrix, MatrixTag, Rule};
pub use platforms::Platforms;
pub use selection::{discover, Job, Request, Selected, Selection};
pub use shard::Shard;
