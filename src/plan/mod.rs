//! The plan of one image: for every platform, what the container sees, what each patch
//! decided, and the new layers, config and manifest it needs; then the new index and the
//! companion tags to move. Computed without writing anything, so `plan` shows exactly what
//! `apply` pushes. [`types`] holds the plan's vocabulary, [`image`] and [`platform`] compute it,
//! [`companions`] finds the per-platform tags, [`record`] turns a plan into the digest map's
//! record.

pub mod companions;
pub mod image;
pub mod platform;
pub mod record;
pub mod types;

pub use image::plan_image;
pub use record::record;
pub use types::{Companion, Error, FileChange, ImagePlan, NewImage, PatchStep, PlatformPlan, Run};
