//! `verify`: independent checks of patched images from what is served now, by reference
//! (structure only) or from a digest map record (against the originals it names). [`types`]
//! holds what is checked against and found, [`image`] checks whole images, [`platform`] one
//! platform, with [`subject`] (the platform as read), [`added`] (the layers this tool appended)
//! and [`original`] (against the original).

pub mod added;
pub mod image;
pub mod original;
pub mod platform;
pub mod subject;
pub mod types;

pub use image::{check_map, check_record, check_reference};
pub use platform::verify_platform;
pub use types::{Checks, Error, ImageCheck, PlatformCheck};
