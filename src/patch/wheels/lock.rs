//! PEP 751 lock files (`pylock.toml`): the packages and their hashed wheels.

use std::path::{Path, PathBuf};

/// A parsed lock: its packages in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub packages: Vec<Package>,
}

/// One `[[packages]]` entry that has wheels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    pub name: String,
    pub version: Option<String>,
    pub marker: Option<String>,
    pub requires_python: Option<String>,
    pub wheels: Vec<LockedWheel>,
}

/// One locked wheel of a package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedWheel {
    pub filename: String,
    pub url: Option<String>,
    pub path: Option<PathBuf>,
    pub sha256: String,
    pub size: Option<u64>,
}

/// A lock that cannot be used: "origin:line: what is wrong".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LockError(pub String);

/// Parses `text` (read from `origin`, paths relative to `folder`).
pub fn parse(text: &str, origin: &str, folder: &Path) -> Result<Lock, LockError> {
    let _ = (text, origin, folder);
    todo!()
}
