//! Wheel file names and platform tags: which locked wheel fits a platform.

use super::lock::{LockedWheel, Package};
use super::target::Target;

/// A parsed wheel file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    pub dist: String,
    pub version: String,
    pub build: Option<String>,
    pub tags: Vec<(String, String, String)>,
}

/// Parses a wheel file name (PEP 427/491).
pub fn parse_name(filename: &str) -> Result<WheelName, String> {
    let _ = filename;
    todo!()
}

/// The tags `t` supports, in pip's order, best first.
pub fn supported(t: &Target) -> Vec<(String, String, String)> {
    let _ = t;
    todo!()
}

/// The one wheel of `pkg` that fits, or a line naming the package and the tags it needed.
pub fn choose<'a>(pkg: &'a Package, t: &Target) -> Result<&'a LockedWheel, String> {
    let _ = (pkg, t);
    todo!()
}
