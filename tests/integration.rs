//! Integration tests: the real binary against the CNCF distribution registry on loopback, with
//! fixture images from `fixtures/build.py`, and results checked by skopeo, umoci and GNU tar.

#[path = "it/harness.rs"]
mod harness;

#[path = "it/action.rs"]
mod action;
#[path = "it/apply.rs"]
mod apply;
#[path = "it/blobs.rs"]
mod blobs;
#[path = "it/containerd.rs"]
mod containerd;
#[path = "it/durability.rs"]
mod durability;
#[path = "it/files.rs"]
mod files;
#[path = "it/hostile.rs"]
mod hostile;
#[path = "it/layout.rs"]
mod layout;
#[path = "it/matrix.rs"]
mod matrix;
#[path = "it/overlay.rs"]
mod overlay;
#[path = "it/patch_kinds.rs"]
mod patch_kinds;
#[path = "it/pipeline.rs"]
mod pipeline;
#[path = "it/pipeline_ci.rs"]
mod pipeline_ci;
#[path = "it/provenance.rs"]
mod provenance;
#[path = "it/ranges.rs"]
mod ranges;
#[path = "it/refuse.rs"]
mod refuse;
#[path = "it/release.rs"]
mod release;
#[path = "it/reliability.rs"]
mod reliability;
#[path = "it/wheels.rs"]
mod wheels;
