//! What a patch that installs Python distributions reads of an image and of the world: the
//! installed distributions an image shows ([`Dist`]) and the files it fetches before any image
//! is read ([`Input`]). Leaf types, shared by the scan that collects them and the kinds that
//! use them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// One installed distribution as the image shows it: its `.dist-info` directory and the small
/// files in it, raw (parsing them is the kind's business).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dist {
    /// The `.dist-info` directory, relative to `/` (`usr/lib/python3/dist-packages/a-1.0.dist-info`).
    pub dir: String,
    /// Its metadata files by name (`METADATA`, `RECORD`, `entry_points.txt`, `INSTALLER`,
    /// `REQUESTED`, `WHEEL`), as visible in the image.
    pub files: BTreeMap<String, Arc<Vec<u8>>>,
}

/// One wheel a patch installed on a platform, for the digest map and the provenance statement:
/// the distribution, the wheel file and its sha256, and where it came from (credentials never
/// kept).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InstalledWheel {
    pub name: String,
    pub version: String,
    pub wheel: String,
    /// Hex.
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A file fetched from outside before any image is read (a lock's wheel by URL): it is used
/// only once its sha256 is the one named, and kept at `dest` for the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub url: String,
    /// Hex sha256 the fetched bytes must have.
    pub sha256: String,
    /// Where the kind reads it from once fetched.
    pub dest: PathBuf,
}
