//! runner-patch: patches released runner images at the registry.
//!
//! Data flows one way, one module per step: a reference ([`registry`]) gives manifests and
//! configs ([`media`]); [`scan`] finds the file the container sees; [`patch`] decides and edits
//! it; [`layer`] builds the new layer; [`rewrite`] appends it to config, manifest and index;
//! [`plan`] holds all of that per image; [`push`] writes it; [`provenance`] attaches the record of it beside the image;
//! [`digest_map`] records it.

pub mod cli;
pub mod cmd;
pub mod digest;
pub mod digest_map;
pub mod image;
pub mod layer;
pub mod media;
pub mod output;
pub mod patch;
pub mod patches;
pub mod plan;
pub mod progress;
pub mod provenance;
pub mod push;
pub mod registry;
pub mod report;
pub mod rewrite;
pub mod scan;
pub mod scan_cache;
pub mod summary;
pub mod tags;
pub mod verify;
pub mod version;
pub mod view;
