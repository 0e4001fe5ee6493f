//! The scan's vocabulary: what to look for ([`Wanted`]), what a found entry holds
//! ([`FileEntry`]), the budget of kept bytes, and path rules shared by every layer read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The biggest target or companion file kept in memory (real ones are tens of KiB).
pub const MAX_KEPT_FILE: u64 = 16 * 1024 * 1024;
/// What one layer's scan may keep: files, paths and its index of non-directory entries
/// (real layers keep well under 1 MiB; a hostile one is refused before it costs memory).
pub const MAX_KEPT_PER_LAYER: u64 = 24 * 1024 * 1024;
/// What all layer scans of one run may keep together (they are cached for the whole run).
pub const MAX_KEPT_PER_RUN: u64 = 48 * 1024 * 1024;
/// The biggest distribution metadata file kept (`RECORD` of torch is about 2 MiB).
pub const MAX_DIST_FILE: u64 = 8 * 1024 * 1024;
/// What the distribution metadata of one run may keep together, apart from the budget above:
/// a real vLLM image shows about 300 distributions, their metadata a few tens of MiB at most
/// with the copies lower layers hold; a hostile image is refused before it costs more.
pub const MAX_DIST_KEPT_PER_RUN: u64 = 40 * 1024 * 1024;
/// The file names of a `*.dist-info` directory a scan for distributions keeps.
pub const DIST_FILES: [&str; 6] = [
    "METADATA",
    "RECORD",
    "entry_points.txt",
    "INSTALLER",
    "REQUESTED",
    "WHEEL",
];
/// The longest tar header extension (GNU long name or link, PAX record set) read: the tar
/// reader holds one whole, so a hostile layer could otherwise inflate one into gigabytes.
pub(super) const MAX_TAR_EXTENSION: u64 = 1024 * 1024;
/// Bookkeeping counted for each kept path or file besides its bytes (allocation, map node).
pub(super) const ITEM_OVERHEAD: u64 = 64;
/// Each indexed non-directory entry costs one `u64`.
pub(super) const INDEX_ENTRY: u64 = 8;

/// What to look for: path suffixes matched on whole components, and exact paths.
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    /// Files whose entries (header and content) are kept, e.g.
    /// `vllm/distributed/.../multi_connector.py`: the files patches read or write, guards and
    /// the anchors that locate a package.
    pub targets: Vec<String>,
    /// Small files read for their content only, by suffix.
    pub companions: Vec<String>,
    /// Distribution names whose version files are collected (`<pkg>-*.dist-info/METADATA`,
    /// `<pkg>/_version.py`).
    pub packages: Vec<String>,
    /// Exact paths (normalized, relative to `/`) whose entries are kept, as a patch names them:
    /// symbolic links on the way may lead elsewhere, so a scan with any also keeps every link's
    /// target and indexes directories, for the path to be resolved as the container does
    /// (`scan::links`).
    pub paths: Vec<String>,
    /// Exact paths whose entries are kept and nothing more: the second read of a layer that
    /// holds a file found through a link.
    pub resolved: Vec<String>,
    /// Whether the metadata files of every `*.dist-info` directory are kept ([`DIST_FILES`]),
    /// for kinds that install distributions; a scan for them reads every layer.
    pub dists: bool,
}

impl Wanted {
    /// Whether a top-down scan for this reads every layer whatever it finds (only a refusal
    /// ends it early): a walk for exact paths (links anywhere below may lead elsewhere) and
    /// one for installed distributions. Such a scan may read its layers side by side.
    pub fn reads_every_layer(&self) -> bool {
        self.dists || !self.paths.is_empty()
    }
}

/// The kind of a tar entry found at a wanted path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    Regular,
    Symlink(String),
    Hardlink(String),
    Other(String),
}

/// One tar entry found at a wanted path, with the header fields a replacement must keep.
#[derive(Debug, Clone)]
pub struct FileEntry {
    pub path: String,
    pub kind: EntryKind,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub uname: Option<String>,
    pub gname: Option<String>,
    pub mtime: u64,
    /// Shared, not copied, between the run's cached layer scan and each image's view of it.
    pub content: Arc<Vec<u8>>,
}

impl FileEntry {
    /// A regular file this tool creates where none was: root-owned, no user or group names.
    pub fn created(path: String, content: Vec<u8>, mode: u32, mtime: u64) -> Self {
        FileEntry {
            path,
            kind: EntryKind::Regular,
            mode,
            uid: 0,
            gid: 0,
            uname: None,
            gname: None,
            mtime,
            content: Arc::new(content),
        }
    }
}

/// A count of kept bytes shared by every scan of a run, so that many layers each under the
/// per-layer cap cannot together exhaust memory. Distribution metadata is counted apart
/// ([`MAX_DIST_KEPT_PER_RUN`]): it is far bigger than what other kinds keep, and bounded too.
#[derive(Debug)]
pub struct Budget {
    cap: u64,
    used: AtomicU64,
    dist_cap: u64,
    dist_used: AtomicU64,
}

impl Budget {
    pub const fn new(cap: u64) -> Self {
        Budget::with_dists(cap, MAX_DIST_KEPT_PER_RUN)
    }

    /// A budget with its own cap for distribution metadata.
    pub const fn with_dists(cap: u64, dist_cap: u64) -> Self {
        Budget {
            cap,
            used: AtomicU64::new(0),
            dist_cap,
            dist_used: AtomicU64::new(0),
        }
    }

    /// Takes `n` bytes of distribution metadata; `Err(bytes in use)` past its cap.
    pub(super) fn take_dist(&self, n: u64) -> Result<(), u64> {
        self.dist_used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|t| *t <= self.dist_cap)
            })
            .map(|_| ())
    }

    pub(super) fn give_back_dist(&self, n: u64) {
        let _ = self
            .dist_used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(n))
            });
    }

    /// Bytes of distribution metadata in use now.
    pub fn dist_used(&self) -> u64 {
        self.dist_used.load(Ordering::Acquire)
    }

    /// The cap of distribution metadata, for messages.
    pub(super) fn dist_cap(&self) -> u64 {
        self.dist_cap
    }

    /// Takes `n` bytes; `Err(bytes in use)` when that would pass the cap. (Public so that a
    /// scan restored from the scan cache is charged like one read now.)
    pub fn take(&self, n: u64) -> Result<(), u64> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|t| *t <= self.cap)
            })
            .map(|_| ())
    }

    pub(super) fn give_back(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(n))
            });
    }

    /// Bytes in use now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

/// Tar paths come as `./usr/x`, `usr/x` or `/usr/x/`: compare them in one form.
pub fn normalize(path: &str) -> String {
    let p = path
        .trim_start_matches("./")
        .trim_start_matches('/')
        .trim_end_matches('/');
    let mut out = String::with_capacity(p.len());
    for part in p.split('/').filter(|s| !s.is_empty() && *s != ".") {
        if !out.is_empty() {
            out.push('/');
        }
        out.push_str(part);
    }
    out
}

/// Why a raw tar path is unsafe to lay over a root filesystem, if it is: a `..` component (it
/// could name something outside the root, or another path than it spells), a NUL byte (the
/// path is cut short by whoever reads it as a C string), or a whiteout of `.`, `..` or nothing.
pub fn unsafe_path(raw: &[u8]) -> Option<&'static str> {
    if raw.contains(&0) {
        return Some("holds a NUL byte");
    }
    let mut parts = raw.split(|b| *b == b'/').filter(|p| !p.is_empty());
    if parts.clone().any(|p| p == b"..") {
        return Some("has a `..` component");
    }
    match parts.next_back() {
        Some(b".wh." | b".wh.." | b".wh...") => Some("whites out `.`, `..` or nothing"),
        _ => None,
    }
}

/// The Python 3 minor version a path shows installed (`.../lib/python3.12/...`,
/// `.../bin/python3.11`): a component `python3.N` right below `lib`, `lib64` or `bin`.
pub fn interpreter_minor(path: &str) -> Option<u32> {
    let mut parent = "";
    for part in path.split('/') {
        if matches!(parent, "lib" | "lib64" | "bin") {
            if let Some(m) = part
                .strip_prefix("python3.")
                .filter(|m| !m.is_empty() && m.len() <= 3 && m.bytes().all(|b| b.is_ascii_digit()))
            {
                return m.parse().ok();
            }
        }
        parent = part;
    }
    None
}

/// True when `path` ends with `suffix` on a component boundary.
pub fn has_suffix(path: &str, suffix: &str) -> bool {
    path == suffix
        || (path.ends_with(suffix) && path.as_bytes()[path.len() - suffix.len() - 1] == b'/')
}

pub(super) fn split_parent(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

impl Wanted {
    /// One wanted file, as `Wanted` for a single target (the built-in patch's scan).
    pub fn single(target: &str, package: &str) -> Self {
        Wanted {
            targets: vec![target.to_owned()],
            packages: vec![package.to_owned()],
            ..Wanted::default()
        }
    }

    /// Whether `path` is one of the wanted files (by suffix or exactly).
    pub fn is_target(&self, path: &str) -> bool {
        self.targets.iter().any(|t| has_suffix(path, t)) || self.is_exact(path)
    }

    /// Whether `path` is one of the exact paths wanted.
    pub fn is_exact(&self, path: &str) -> bool {
        self.paths.iter().chain(&self.resolved).any(|p| p == path)
    }

    /// Whether the scan learns links and directories, to resolve exact paths.
    pub fn resolves_links(&self) -> bool {
        !self.paths.is_empty()
    }

    /// Compiled bytecode of a wanted Python module (`<dir>/__pycache__/<stem>.*.pyc`).
    pub(super) fn is_pyc(&self, path: &str) -> bool {
        let (dir, name) = split_parent(path);
        let (cache_parent, cache) = split_parent(dir);
        if cache != "__pycache__" || !name.ends_with(".pyc") {
            return false;
        }
        self.targets.iter().any(|t| {
            let (tdir, tname) = split_parent(t);
            tname.strip_suffix(".py").is_some_and(|stem| {
                has_suffix(cache_parent, tdir) && name.starts_with(&format!("{stem}."))
            })
        })
    }

    /// Whether `path` is a metadata file of a `*.dist-info` directory a scan for
    /// distributions keeps.
    pub(super) fn is_dist_file(&self, path: &str) -> bool {
        self.dists && is_dist_file(path)
    }

    pub(super) fn is_kept_file(&self, path: &str) -> bool {
        if self.companions.iter().any(|c| has_suffix(path, c)) {
            return true;
        }
        let (dir, name) = split_parent(path);
        let (_, dirname) = split_parent(dir);
        self.packages.iter().any(|package| {
            (name == "METADATA"
                && dirname.starts_with(&format!("{package}-"))
                && dirname.ends_with(".dist-info"))
                || (name == "_version.py" && dirname == package)
        })
    }
}

/// Whether `path` names one of [`DIST_FILES`] directly inside a `*.dist-info` directory.
pub fn is_dist_file(path: &str) -> bool {
    let (dir, name) = split_parent(path);
    let (_, dirname) = split_parent(dir);
    DIST_FILES.contains(&name)
        && dirname.len() > ".dist-info".len()
        && dirname.ends_with(".dist-info")
}

/// Reads the version from a dist-info `METADATA` or a `_version.py`.
pub fn version_from_file(path: &str, content: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(content);
    if path.ends_with("/METADATA") || path == "METADATA" {
        return text
            .lines()
            .take_while(|l| !l.is_empty())
            .find_map(|l| l.strip_prefix("Version:"))
            .map(|v| v.trim().to_owned());
    }
    // setuptools-scm style: `__version__ = version = '0.20.2'` or `version = "0.20.2"`.
    text.lines().find_map(|l| {
        let l = l.trim();
        if !(l.starts_with("__version__") || l.starts_with("version")) || l.contains(':') {
            return None;
        }
        let rhs = l.rsplit('=').next()?.trim();
        let v = rhs.trim_matches(|c| c == '\'' || c == '"');
        (v.len() + 2 == rhs.len() && !v.is_empty()).then(|| v.to_owned())
    })
}
