//! What the container sees of an image, read from its layers top-down: the run's layer reader
//! (`layers.rs`: each layer read once per run, through the scan cache, its kept bytes charged
//! to the run's budget), the second read that hashes files (`hashes.rs`) and [`Visible`], the
//! overlay tree a patch decides on (`tree.rs`). `plan` and `verify` both read images through
//! here, so neither depends on the other.

mod hashes;
mod layers;
mod tree;

pub use hashes::give_hashes;
pub use layers::{Error, Layers, Search};
pub use tree::{pycs_of, Visible};

#[cfg(test)]
mod tests;
