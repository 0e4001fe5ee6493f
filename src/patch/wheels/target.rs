//! What one platform of an image offers to a wheel: Python, arch, glibc, install scheme.

use crate::patch::tree::Tree;

/// Where pip puts each part of a wheel, relative to `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheme {
    pub purelib: String,
    pub platlib: String,
    pub scripts: String,
    /// `usr/local/include/python3.11` (the dist name is appended by install).
    pub headers: String,
    /// The prefix.
    pub data: String,
}

/// One platform of an image as a wheel install sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub python: (u32, u32),
    pub python_full: String,
    pub arch: String,
    pub glibc: Option<(u32, u32)>,
    pub site: String,
    pub scheme: Scheme,
    pub interpreter: String,
}

/// `site`: the chosen install dir; `interpreter`: patch.toml's override.
pub fn detect(tree: &dyn Tree, site: &str, interpreter: Option<&str>) -> Result<Target, String> {
    let _ = (tree, site, interpreter);
    todo!()
}

/// Exact paths `detect` reads (libc, interpreters), for `PatchKind::paths()`.
pub fn probe_paths() -> Vec<String> {
    todo!()
}
