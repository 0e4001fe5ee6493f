//! Layer scan: reads one compressed layer as a stream (inflate -> tar), and reports what the
//! container would see of the files a patch cares about, once the layers above it are laid over
//! it the way overlayfs and the unpackers (umoci, containerd) do it. Nothing is buffered but the
//! few small files it is asked for, within a budget per layer and per run; every layer is read
//! to its end so that its digest and size are checked before anything found in it is trusted.

mod hash;
mod keep;
mod links;
mod overlay;
mod read;
#[cfg(test)]
mod tests;
mod types;

pub use hash::hash_layer;
pub use links::{node_in, resolve, LinkError, Node, Resolved, MAX_LINKS};
pub use overlay::{Descent, Hidden, HiddenBy, LayerScan, NodeKind, Overlay};
pub use read::{decompress, scan_layer, ScanError};
pub use types::*;
