//! runner-patch: patches released runner images where they live (a registry or an OCI layout
//! directory).
//!
//! Data flows one way, one module per step: a reference ([`registry`]) gives manifests and
//! configs ([`media`], read through the typed [`image`] view); [`scan`] reads layers and
//! [`visible`] shows what the container sees; each [`patch`] decides on that tree; [`layer`]
//! builds the new layer; [`rewrite`] appends it to config, manifest and index; [`plan`] holds
//! all of that per image; [`push`] writes it; [`provenance`] attaches the record of it beside
//! the image; [`digest_map`] records it. [`apply`] runs those steps for one image, in order;
//! [`verify`] checks the result from what is served; [`rollback`] puts the originals back.
//! Which tags and platforms a run takes is [`select`]ed first (explicit tags, a runner
//! `matrix.yaml`, or discovery). The library never draws: progress goes to a [`progress`] listener the binary sets.

pub mod apply;
pub mod digest;
pub mod digest_map;
pub mod fsutil;
pub mod image;
pub mod inputs;
pub mod layer;
pub mod media;
pub mod patch;
pub mod plan;
pub mod progress;
pub mod provenance;
pub mod push;
pub mod registry;
pub mod resolve;
pub mod rewrite;
pub mod rollback;
pub mod scan;
pub mod scan_cache;
pub mod select;
pub mod tags;
pub mod units;
pub mod verify;
pub mod version;
pub mod visible;

/// `--version`: the release and the commit it was built from, so a pipeline log (and the scan
/// cache's keys) say exactly which build ran.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("RUNNER_PATCH_GIT_COMMIT"),
    ")"
);
