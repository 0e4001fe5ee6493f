//! What a patch asks of a resolver for one platform, and what comes back: the vocabulary
//! between a kind that installs from requirement lines (`wheels` with `requirements`) and the
//! resolver (`crate::resolve`, uv), so neither knows the other. Leaf types.

/// One platform's resolution request: the lines with the platform's `${NAME}` values filled
/// in, where to look, and the environment `uv pip install --system` would see inside the
/// container.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Request {
    /// The patch's id.
    pub patch: String,
    /// The patch folder, where its lock files (`runner-patch lock`) lie; `None` for a
    /// built-in patch.
    pub folder: Option<std::path::PathBuf>,
    /// Requirement lines, expanded.
    pub lines: Vec<String>,
    /// uv's index options (credentials included: only uv sees them).
    pub index_args: Vec<String>,
    /// The image's Python, X.Y.
    pub python: String,
    /// "x86_64" or "aarch64".
    pub arch: String,
    /// The image's glibc, (major, minor).
    pub glibc: (u32, u32),
    /// The install dir, relative to `/`.
    pub site: String,
    /// The distributions installed there: `.dist-info` directory name and `METADATA` bytes.
    pub installed: Vec<(String, Vec<u8>)>,
}

/// What the resolver chose for one platform.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    /// A PEP 751 lock of every distribution to install (exact versions, each wheel's URL and
    /// sha256), empty of packages when the image already satisfies the lines.
    pub lock: String,
    /// What changes, by name.
    pub changes: Vec<DistChange>,
    /// The resolver's warnings, one line each.
    pub warnings: Vec<String>,
    /// The install dir it was resolved for (the request's), relative to `/`.
    pub site: String,
    /// Where the answer came from, for people: `resolved by uv 0.13.9`, or
    /// `from pylock.x86-64-py311.toml`.
    pub source: String,
}

/// One distribution the resolver changes: installed (`from` None), upgraded or downgraded
/// (both), or uninstalled (`to` None).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistChange {
    pub name: String,
    pub from: Option<String>,
    pub to: Option<String>,
}
