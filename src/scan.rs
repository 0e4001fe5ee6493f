//! Layer scan: reads one compressed layer as a stream (inflate -> tar), and reports what the
//! container would see of the files a patch cares about, once the layers above it are laid over
//! it the way overlayfs and the unpackers (umoci, containerd) do it. Nothing is buffered but the
//! few small files it is asked for, within a budget per layer and per run; every layer is read
//! to its end so that its digest and size are checked before anything found in it is trusted.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::io::{self, Read};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use flate2::read::MultiGzDecoder;

use crate::media::{Compression, Descriptor};

/// The biggest target or companion file kept in memory (real ones are tens of KiB).
pub const MAX_KEPT_FILE: u64 = 16 * 1024 * 1024;
/// What one layer's scan may keep: files, paths and its index of non-directory entries
/// (real layers keep well under 1 MiB; a hostile one is refused before it costs memory).
pub const MAX_KEPT_PER_LAYER: u64 = 24 * 1024 * 1024;
/// What all layer scans of one run may keep together (they are cached for the whole run).
pub const MAX_KEPT_PER_RUN: u64 = 48 * 1024 * 1024;
/// The longest tar header extension (GNU long name or link, PAX record set) read: the tar
/// reader holds one whole, so a hostile layer could otherwise inflate one into gigabytes.
const MAX_TAR_EXTENSION: u64 = 1024 * 1024;
/// Bookkeeping counted for each kept path or file besides its bytes (allocation, map node).
const ITEM_OVERHEAD: u64 = 64;
/// Each indexed non-directory entry costs one `u64`.
const INDEX_ENTRY: u64 = 8;

/// What to look for, as path suffixes matched on whole components.
#[derive(Debug, Clone)]
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

/// A non-directory entry, as far as hiding a lower directory goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    File,
    Symlink,
    Hardlink,
    Device,
    Fifo,
    Other,
}

impl NodeKind {
    fn of(t: tar::EntryType) -> NodeKind {
        match t {
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                NodeKind::File
            }
            tar::EntryType::Symlink => NodeKind::Symlink,
            tar::EntryType::Link => NodeKind::Hardlink,
            tar::EntryType::Char | tar::EntryType::Block => NodeKind::Device,
            tar::EntryType::Fifo => NodeKind::Fifo,
            _ => NodeKind::Other,
        }
    }

    fn code(self) -> u64 {
        match self {
            NodeKind::File => 1,
            NodeKind::Symlink => 2,
            NodeKind::Hardlink => 3,
            NodeKind::Device => 4,
            NodeKind::Fifo => 5,
            NodeKind::Other => 6,
        }
    }

    fn from_code(c: u64) -> NodeKind {
        match c {
            1 => NodeKind::File,
            2 => NodeKind::Symlink,
            3 => NodeKind::Hardlink,
            4 => NodeKind::Device,
            5 => NodeKind::Fifo,
            _ => NodeKind::Other,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            NodeKind::File => "a regular file",
            NodeKind::Symlink => "a symbolic link",
            NodeKind::Hardlink => "a hard link",
            NodeKind::Device => "a device node",
            NodeKind::Fifo => "a FIFO",
            NodeKind::Other => "a non-directory entry",
        }
    }
}

/// The key of a path in a layer's index of non-directory entries: a 61-bit hash with the kind
/// in the low bits. Hashes keep the index at 8 bytes an entry whatever the path lengths; a
/// collision (odds about 1 in 10^13 for a large image) can only refuse, never patch.
fn index_key(path: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    h.finish() & !7
}

/// What one layer holds of interest, and its verified digest.
#[derive(Debug, Clone, Default)]
pub struct LayerScan {
    /// The layer's digest, for messages.
    pub digest: String,
    /// The target entries, one per path (a later entry of the same path replaces an earlier one,
    /// as extraction does).
    pub targets: Vec<FileEntry>,
    /// `__pycache__/<stem>.*.pyc` paths beside any copy of the target.
    pub pycs: BTreeSet<String>,
    /// Small files: companions and version files, by full path.
    pub files: BTreeMap<String, Arc<Vec<u8>>>,
    /// Paths this layer whites out in the layers below (`.wh.NAME`).
    pub whiteouts: BTreeSet<String>,
    /// Directories this layer makes opaque (`.wh..wh..opq`).
    pub opaques: BTreeSet<String>,
    /// Sorted [`index_key`]s (with kinds) of every non-directory entry; empty for a layer holding
    /// the target, where a top-down scan stops.
    non_dirs: Vec<u64>,
    /// Why this layer cannot be used (an unsafe path, a budget exceeded); then nothing else in
    /// it is kept.
    pub refusal: Option<String>,
    /// Bytes kept, as counted against the budgets.
    pub kept: u64,
    pub compressed_bytes: u64,
}

impl LayerScan {
    /// The index of non-directory entries, for the scan cache to keep (`scan_cache.rs`).
    pub fn index_keys(&self) -> &[u64] {
        &self.non_dirs
    }

    /// Restores the index of a scan the scan cache kept; `keys` sorted, as
    /// [`Self::index_keys`] gives them.
    pub fn set_index_keys(&mut self, keys: Vec<u64>) {
        self.non_dirs = keys;
    }

    /// The kind of the non-directory entry this layer holds at `path`, if any.
    pub fn non_dir(&self, path: &str) -> Option<NodeKind> {
        let key = index_key(path);
        let i = self.non_dirs.partition_point(|k| *k < key);
        self.non_dirs
            .get(i)
            .filter(|k| **k & !7 == key)
            .map(|k| NodeKind::from_code(*k & 7))
    }
}

/// A count of kept bytes shared by every scan of a run, so that many layers each under the
/// per-layer cap cannot together exhaust memory.
#[derive(Debug)]
pub struct Budget {
    cap: u64,
    used: AtomicU64,
}

impl Budget {
    pub const fn new(cap: u64) -> Self {
        Budget {
            cap,
            used: AtomicU64::new(0),
        }
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

    fn give_back(&self, n: u64) {
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

/// How an upper layer hides a lower path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HiddenBy {
    /// A `.wh.` entry at the path or one of its ancestors.
    Whiteout,
    /// An opaque directory at one of its ancestors.
    Opaque,
    /// A non-directory entry at one of its ancestors: the lower tree is gone from view.
    NonDir(NodeKind),
}

/// Which upper entry hides a lower path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    /// The path of the hiding entry (the whited-out path, the opaque or non-directory ancestor).
    pub at: String,
    pub by: HiddenBy,
    /// The digest of the layer holding the hiding entry.
    pub layer: String,
}

impl std::fmt::Display for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (at, layer) = (&self.at, &self.layer);
        match &self.by {
            HiddenBy::Whiteout => write!(f, "a whiteout of /{at} in layer {layer}"),
            HiddenBy::Opaque => write!(f, "the opaque directory /{at} in layer {layer}"),
            HiddenBy::NonDir(k) => write!(f, "{} at /{at} in layer {layer}", k.describe()),
        }
    }
}

/// The layers above the one being looked at, top first: what they hide from it.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    upper: Vec<Arc<LayerScan>>,
}

/// `a/b/c` -> `a/b`, `a`, `` (the root).
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(path);
    std::iter::from_fn(move || {
        let p = rest?;
        match p.rfind('/') {
            Some(i) => {
                rest = Some(&p[..i]);
                Some(&p[..i])
            }
            None => {
                rest = None;
                (!p.is_empty()).then_some("")
            }
        }
    })
}

impl Overlay {
    /// The top-most upper entry hiding `path`, if any: a whiteout of it or of an ancestor, an
    /// opaque ancestor, or a non-directory ancestor (symlink, file, link, device), which hides
    /// the lower tree in overlayfs and replaces it in umoci and containerd.
    pub fn hider(&self, path: &str) -> Option<Hidden> {
        for layer in &self.upper {
            let hidden = |at: &str, by| Hidden {
                at: at.to_owned(),
                by,
                layer: layer.digest.clone(),
            };
            if layer.whiteouts.contains(path) {
                return Some(hidden(path, HiddenBy::Whiteout));
            }
            for a in ancestors(path) {
                if layer.whiteouts.contains(a) {
                    return Some(hidden(a, HiddenBy::Whiteout));
                }
                if layer.opaques.contains(a) {
                    return Some(hidden(a, HiddenBy::Opaque));
                }
                if let Some(k) = layer.non_dir(a) {
                    return Some(hidden(a, HiddenBy::NonDir(k)));
                }
            }
        }
        None
    }

    /// True when an upper layer hides this path.
    pub fn hides(&self, path: &str) -> bool {
        self.hider(path).is_some()
    }

    /// Adds a scanned layer, which hides things only from the layers below it.
    pub fn absorb(&mut self, layer: Arc<LayerScan>) {
        self.upper.push(layer);
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

/// True when `path` ends with `suffix` on a component boundary.
pub fn has_suffix(path: &str, suffix: &str) -> bool {
    path == suffix
        || (path.ends_with(suffix) && path.as_bytes()[path.len() - suffix.len() - 1] == b'/')
}

fn split_parent(path: &str) -> (&str, &str) {
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
            companions: Vec::new(),
            packages: vec![package.to_owned()],
        }
    }

    /// Whether `path` is one of the wanted files.
    pub fn is_target(&self, path: &str) -> bool {
        self.targets.iter().any(|t| has_suffix(path, t))
    }

    /// Compiled bytecode of a wanted Python module (`<dir>/__pycache__/<stem>.*.pyc`).
    fn is_pyc(&self, path: &str) -> bool {
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

    fn is_kept_file(&self, path: &str) -> bool {
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

/// Errors of a layer scan; each names the layer.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    // The I/O error is shown in the message, not chained as a source: `{:#}` would repeat it.
    #[error("layer {digest}: {error}")]
    Read { digest: String, error: io::Error },
    #[error("layer {digest}: size mismatch: the manifest says {expected} bytes, the registry served {actual}")]
    Size {
        digest: String,
        expected: u64,
        actual: u64,
    },
}

/// Counts the compressed bytes read, to check the size the manifest gives.
struct Counting<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

/// The error a [`Metered`] reader gives when a tar header extension is too long.
#[derive(Debug)]
struct ExtensionTooLong;

impl std::fmt::Display for ExtensionTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a tar header extension is longer than {MAX_TAR_EXTENSION} bytes"
        )
    }
}

impl std::error::Error for ExtensionTooLong {}

/// Bounds what the tar reader may read on its own between two entries (headers, padding, and
/// the GNU long names and PAX records it holds whole); an entry's data, which the scan reads or
/// skips itself, is not bounded.
struct Metered<R> {
    inner: R,
    allowance: Rc<Cell<u64>>,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.allowance.get();
        if left == 0 && !buf.is_empty() {
            return Err(io::Error::other(ExtensionTooLong));
        }
        let len = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..len])?;
        self.allowance.set(left - n as u64);
        Ok(n)
    }
}

/// Scans one layer read from `raw` (its compressed bytes), independently of the layers above,
/// so the result can be shared by every image holding the layer; [`Descent`] then lays the
/// layers over each other. `raw` must verify the digest as it is read (as
/// `Registry::blob_reader` does): the layer is read to its end so that check always runs, also
/// when the scan is refused. What the scan keeps is counted against the per-layer cap and
/// against `run`; passing either, or an unsafe path, makes the scan a refusal that keeps nothing.
pub fn scan_layer<R: Read>(
    raw: R,
    desc: &Descriptor,
    compression: Compression,
    wanted: &Wanted,
    run: &Budget,
) -> Result<LayerScan, ScanError> {
    let err = |error: io::Error| ScanError::Read {
        digest: desc.digest.clone(),
        error,
    };
    let mut counting = Counting {
        inner: raw,
        count: 0,
    };
    let mut scan = LayerScan {
        digest: desc.digest.clone(),
        ..Default::default()
    };
    let mut keeper = Keeper {
        run,
        kept: 0,
        counts: Counts::default(),
    };
    match compression {
        Compression::Gzip => {
            let mut gz = MultiGzDecoder::new(&mut counting);
            scan_tar(&mut gz, wanted, &mut scan, &mut keeper).map_err(err)?;
            // The tar ends before the gzip stream does; read the rest so the CRC is checked.
            io::copy(&mut gz, &mut io::sink()).map_err(err)?;
        }
        Compression::Zstd => {
            // Decodes every frame to the end of the blob; skippable frames are passed over.
            let mut zst = zstd::stream::read::Decoder::new(&mut counting).map_err(err)?;
            scan_tar(&mut zst, wanted, &mut scan, &mut keeper).map_err(err)?;
            // As for gzip: read to the end so every frame's checksum is checked.
            io::copy(&mut zst, &mut io::sink()).map_err(err)?;
        }
        Compression::None => {
            scan_tar(&mut counting, wanted, &mut scan, &mut keeper).map_err(err)?
        }
    }
    io::copy(&mut counting, &mut io::sink()).map_err(err)?;
    if counting.count != desc.size {
        run.give_back(keeper.kept);
        return Err(ScanError::Size {
            digest: desc.digest.clone(),
            expected: desc.size,
            actual: counting.count,
        });
    }
    scan.compressed_bytes = counting.count;
    scan.kept = keeper.kept;
    Ok(scan)
}

/// What a scan kept, by kind, for the message when a budget is passed.
#[derive(Debug, Default)]
struct Counts {
    targets: u64,
    files: u64,
    pycs: u64,
    whiteouts: u64,
    indexed: u64,
}

/// Counts the bytes a layer scan keeps against the per-layer cap and the run's budget.
struct Keeper<'a> {
    run: &'a Budget,
    kept: u64,
    counts: Counts,
}

impl Keeper<'_> {
    /// Takes `n` bytes, or says (as a refusal) which cap it would pass.
    fn take(&mut self, n: u64, digest: &str) -> Result<(), String> {
        if self.kept + n > MAX_KEPT_PER_LAYER {
            return Err(format!(
                "layer {digest}: the scan would keep more than the {} kept per layer ({}); refusing rather than holding it in memory",
                mib(MAX_KEPT_PER_LAYER),
                self.what()
            ));
        }
        if let Err(used) = self.run.take(n) {
            return Err(format!(
                "layer {digest}: this run already keeps {} from the layers it read, and this layer would pass the {} kept per run ({}); refusing rather than holding it in memory",
                mib(used),
                mib(MAX_KEPT_PER_RUN),
                self.what()
            ));
        }
        self.kept += n;
        Ok(())
    }

    fn give_back(&mut self, n: u64) {
        let n = n.min(self.kept);
        self.kept -= n;
        self.run.give_back(n);
    }

    fn what(&self) -> String {
        let c = &self.counts;
        format!(
            "{} kept so far: {} cop{} of the target, {} version or guard file(s), {} .pyc path(s), {} whiteout(s), {} non-directory path(s) indexed",
            mib(self.kept),
            c.targets,
            if c.targets == 1 { "y" } else { "ies" },
            c.files,
            c.pycs,
            c.whiteouts,
            c.indexed
        )
    }
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
}

/// Reads the tar; on a refusal, records it in `scan`, drops everything kept and returns `Ok`
/// (the caller then reads the rest of the stream, so its digest is still checked).
fn scan_tar<R: Read>(
    reader: R,
    wanted: &Wanted,
    scan: &mut LayerScan,
    keeper: &mut Keeper<'_>,
) -> io::Result<()> {
    let allowance = Rc::new(Cell::new(MAX_TAR_EXTENSION));
    let metered = Metered {
        inner: reader,
        allowance: allowance.clone(),
    };
    let mut archive = tar::Archive::new(metered);
    let refusal = match scan_entries(&mut archive, &allowance, wanted, scan, keeper) {
        Ok(()) => None,
        Err(Stop::Refused(why)) => Some(why),
        Err(Stop::Io(e)) => {
            if e.get_ref().is_some_and(|i| i.is::<ExtensionTooLong>()) {
                Some(format!(
                    "layer {}: a tar header extension (GNU long name or PAX records) is longer than {}; refusing",
                    scan.digest,
                    mib(MAX_TAR_EXTENSION)
                ))
            } else {
                keeper.give_back(keeper.kept);
                return Err(e);
            }
        }
    };
    if let Some(why) = refusal {
        let digest = std::mem::take(&mut scan.digest);
        *scan = LayerScan {
            digest,
            refusal: Some(why),
            ..Default::default()
        };
        keeper.give_back(keeper.kept);
        // Whatever the tar reader left unread is read (and checked) by the caller.
        allowance.set(u64::MAX);
        let mut rest = archive.into_inner();
        io::copy(&mut rest, &mut io::sink())?;
        return Ok(());
    }
    // Within one layer, a non-directory entry at an ancestor of a copy of the target leaves
    // that copy to the extraction order: refused like an upper one.
    scan.non_dirs.sort_unstable();
    let inside = scan.targets.iter().find_map(|t| {
        ancestors(&t.path).find_map(|a| {
            scan.non_dir(a).map(|k| {
                format!(
                    "layer {}: /{a} is {} and /{} lies below it in the same layer; refusing to patch through it",
                    scan.digest,
                    k.describe(),
                    t.path
                )
            })
        })
    });
    if let Some(why) = inside {
        let digest = std::mem::take(&mut scan.digest);
        *scan = LayerScan {
            digest,
            refusal: Some(why),
            ..Default::default()
        };
        keeper.give_back(keeper.kept);
        return Ok(());
    }
    let holds_all = wanted
        .targets
        .iter()
        .all(|w| scan.targets.iter().any(|t| has_suffix(&t.path, w)));
    if holds_all {
        // A top-down scan stops at a layer holding every target: nothing below needs its index.
        keeper.give_back(scan.non_dirs.len() as u64 * INDEX_ENTRY);
        scan.non_dirs = Vec::new();
    } else {
        scan.non_dirs.shrink_to_fit();
    }
    Ok(())
}

/// Why the entry loop stopped early.
enum Stop {
    Refused(String),
    Io(io::Error),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Self {
        Stop::Io(e)
    }
}

fn scan_entries<R: Read>(
    archive: &mut tar::Archive<Metered<R>>,
    allowance: &Rc<Cell<u64>>,
    wanted: &Wanted,
    scan: &mut LayerScan,
    keeper: &mut Keeper<'_>,
) -> Result<(), Stop> {
    let digest = scan.digest.clone();
    let mut entries = archive.entries()?;
    loop {
        allowance.set(MAX_TAR_EXTENSION);
        let Some(entry) = entries.next() else {
            return Ok(());
        };
        let mut entry = entry?;
        // The entry's data is the scan's to read or skip, whatever its size.
        allowance.set(u64::MAX);
        let etype = entry.header().entry_type();
        if etype.is_pax_global_extensions()
            || etype.is_pax_local_extensions()
            || etype.is_gnu_longname()
            || etype.is_gnu_longlink()
        {
            io::copy(&mut entry, &mut io::sink())?;
            continue;
        }
        let raw_path = entry.path_bytes().into_owned();
        if let Some(why) = unsafe_path(&raw_path) {
            return Err(Stop::Refused(format!(
                "layer {digest}: the tar path {:?} {why}; refusing the image rather than guessing where it lands",
                String::from_utf8_lossy(&raw_path)
            )));
        }
        let path = normalize(&String::from_utf8_lossy(&raw_path));
        let (parent, name) = split_parent(&path);
        if let Some(hidden) = name.strip_prefix(".wh.") {
            let (set, at) = if hidden == ".wh..opq" {
                (&mut scan.opaques, parent.to_owned())
            } else if parent.is_empty() {
                (&mut scan.whiteouts, hidden.to_owned())
            } else {
                (&mut scan.whiteouts, format!("{parent}/{hidden}"))
            };
            keeper.counts.whiteouts += 1;
            keeper
                .take(at.len() as u64 + ITEM_OVERHEAD, &digest)
                .map_err(Stop::Refused)?;
            set.insert(at);
            io::copy(&mut entry, &mut io::sink())?;
            continue;
        }
        if etype != tar::EntryType::Directory {
            keeper.counts.indexed += 1;
            keeper.take(INDEX_ENTRY, &digest).map_err(Stop::Refused)?;
            scan.non_dirs
                .push(index_key(&path) | NodeKind::of(etype).code());
        }
        if wanted.is_target(&path) {
            let header = entry.header();
            let kind = match etype {
                tar::EntryType::Regular | tar::EntryType::Continuous => EntryKind::Regular,
                tar::EntryType::Symlink => EntryKind::Symlink(link_name(&entry)),
                tar::EntryType::Link => EntryKind::Hardlink(link_name(&entry)),
                other => EntryKind::Other(format!("{other:?}")),
            };
            let mut found = FileEntry {
                path: path.clone(),
                kind,
                mode: header.mode()?,
                uid: header.uid()?,
                gid: header.gid()?,
                uname: header.username().ok().flatten().map(str::to_owned),
                gname: header.groupname().ok().flatten().map(str::to_owned),
                mtime: header.mtime()?,
                content: Arc::default(),
            };
            if found.kind == EntryKind::Regular {
                found.content = Arc::new(read_kept(&mut entry, &path, &digest, keeper, |c| {
                    c.targets += 1
                })?);
            } else {
                keeper.counts.targets += 1;
                keeper
                    .take(path.len() as u64 + ITEM_OVERHEAD, &digest)
                    .map_err(Stop::Refused)?;
            }
            // The same path twice: the later entry is what extraction leaves.
            if let Some(i) = scan.targets.iter().position(|t| t.path == path) {
                let old = scan.targets.remove(i);
                keeper.give_back(old.content.len() as u64 + old.path.len() as u64 + ITEM_OVERHEAD);
            }
            scan.targets.push(found);
        } else if wanted.is_pyc(&path) && etype != tar::EntryType::Directory {
            if !scan.pycs.contains(&path) {
                keeper.counts.pycs += 1;
                keeper
                    .take(path.len() as u64 + ITEM_OVERHEAD, &digest)
                    .map_err(Stop::Refused)?;
                scan.pycs.insert(path);
            }
        } else if etype.is_file() && wanted.is_kept_file(&path) {
            let content = Arc::new(read_kept(&mut entry, &path, &digest, keeper, |c| {
                c.files += 1
            })?);
            let cost = path.len() as u64 + ITEM_OVERHEAD;
            if let Some(old) = scan.files.insert(path, content) {
                keeper.give_back(old.len() as u64 + cost);
            }
        }
        io::copy(&mut entry, &mut io::sink())?;
    }
}

fn link_name<R: Read>(entry: &tar::Entry<R>) -> String {
    entry
        .link_name()
        .ok()
        .flatten()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads an entry's content into memory when the caps allow it.
fn read_kept<R: Read>(
    entry: &mut tar::Entry<R>,
    path: &str,
    digest: &str,
    keeper: &mut Keeper<'_>,
    count: impl FnOnce(&mut Counts),
) -> Result<Vec<u8>, Stop> {
    let size = entry.size();
    if size > MAX_KEPT_FILE {
        return Err(Stop::Refused(format!(
            "layer {digest}: /{path} is {size} bytes, more than the {} kept per file; refusing rather than holding it in memory",
            mib(MAX_KEPT_FILE)
        )));
    }
    count(&mut keeper.counts);
    keeper
        .take(size + path.len() as u64 + ITEM_OVERHEAD, digest)
        .map_err(Stop::Refused)?;
    let mut buf = Vec::with_capacity(size as usize);
    entry.take(size).read_to_end(&mut buf)?;
    Ok(buf)
}

/// A top-down walk over an image's layers with overlay semantics: feed it layer scans from the
/// top, and it keeps what the container sees. Pure, so the overlay model is tested without a
/// registry; the reading itself is the caller's.
#[derive(Debug, Default)]
pub struct Descent {
    overlay: Overlay,
    /// The wanted suffixes (empty: every target is one class, as for a single target).
    targets: Vec<String>,
    /// The suffixes whose top-most visible copies end the walk (empty: any target does).
    anchors: Vec<String>,
    /// (index in the manifest, the visible target entries of that layer), top-most first.
    pub hits: Vec<(usize, Vec<FileEntry>)>,
    /// Visible `.pyc` files of the target's module, seen in any layer read.
    pub pycs: BTreeSet<String>,
    /// Visible small files (guards, version files), first copy top-down.
    pub files: BTreeMap<String, Arc<Vec<u8>>>,
    pub layers_scanned: usize,
    pub bytes_scanned: u64,
    /// Why the image cannot be patched as it is (a refused layer, a shadowed target, an
    /// unreadable layer); the walk stops there.
    pub refusal: Option<String>,
    /// The top-most copy of the target that an upper whiteout or opaque directory hides, and
    /// what hides it: the explanation when no copy is visible.
    pub hidden: Option<(String, String, Hidden)>,
}

impl Descent {
    /// A walk looking for `targets` that may stop once every one of `anchors` has been seen
    /// visible (in as many layers as [`Descent::push`] is told).
    pub fn new(targets: &[String], anchors: &[String]) -> Self {
        Descent {
            targets: targets.to_vec(),
            anchors: anchors.to_vec(),
            ..Default::default()
        }
    }

    /// The wanted suffix a path answers to (for a walk with no list: all one class).
    fn class_of<'a>(&'a self, path: &str) -> Option<&'a str> {
        self.targets
            .iter()
            .find(|t| has_suffix(path, t))
            .map(String::as_str)
    }

    /// Whether a visible copy of what `path` answers to was found in a layer above.
    fn seen_above(&self, path: &str) -> bool {
        let class = self.class_of(path);
        self.hits
            .iter()
            .flat_map(|(_, v)| v)
            .any(|h| self.class_of(&h.path) == class)
    }

    /// Whether every anchor has visible copies in `needed` layers (with no anchors: any
    /// target in `needed` layers).
    fn anchored(&self, needed: usize) -> bool {
        if self.anchors.is_empty() {
            return self.hits.len() >= needed;
        }
        self.anchors.iter().all(|a| {
            self.hits
                .iter()
                .filter(|(_, v)| v.iter().any(|h| has_suffix(&h.path, a)))
                .count()
                >= needed
        })
    }

    /// The visible entries of the top-most layer holding a copy of `suffix` (the copies a
    /// container sees; lower ones are older copies of the same file or other installs).
    pub fn visible(&self, suffix: &str) -> Vec<&FileEntry> {
        self.hits
            .iter()
            .map(|(_, v)| {
                v.iter()
                    .filter(|h| has_suffix(&h.path, suffix))
                    .collect::<Vec<_>>()
            })
            .find(|v| !v.is_empty())
            .unwrap_or_default()
    }

    /// Stops the walk with a refusal.
    pub fn refuse(&mut self, why: String) {
        self.refusal = Some(why);
    }

    /// Lays the next lower layer (`index` in the manifest) under those read; returns true when
    /// the walk is over: a refusal, or `hits_needed` layers holding a visible copy of each
    /// anchor.
    ///
    /// A copy of the target hidden by a non-directory ancestor (a symlink, a file, a link, a
    /// device) in a higher layer refuses the image when no visible copy was found above it:
    /// the container sees no such file there, and whatever a link points to is not patched
    /// through it. A copy hidden by a whiteout or an opaque directory is a deleted file, as
    /// the decoys of real images are; the walk goes on below it.
    pub fn push(&mut self, index: usize, layer: Arc<LayerScan>, hits_needed: usize) -> bool {
        self.layers_scanned += 1;
        self.bytes_scanned += layer.compressed_bytes;
        if let Some(why) = &layer.refusal {
            self.refusal = Some(why.clone());
            return true;
        }
        let mut visible = Vec::new();
        for t in &layer.targets {
            match self.overlay.hider(&t.path) {
                None => visible.push(t.clone()),
                Some(h) if !self.seen_above(&t.path) => {
                    if let HiddenBy::NonDir(_) = h.by {
                        self.refusal = Some(format!(
                            "/{} (layer {}) is shadowed by {h}: the container does not see it; refusing rather than patching through it",
                            t.path, layer.digest
                        ));
                        return true;
                    }
                    if self.hidden.is_none() {
                        self.hidden = Some((t.path.clone(), layer.digest.clone(), h));
                    }
                }
                Some(_) => {}
            }
        }
        for p in &layer.pycs {
            if !self.overlay.hides(p) {
                self.pycs.insert(p.clone());
            }
        }
        for (p, c) in &layer.files {
            if !self.files.contains_key(p) && !self.overlay.hides(p) {
                self.files.insert(p.clone(), c.clone());
            }
        }
        self.overlay.absorb(layer);
        if !visible.is_empty() {
            self.hits.push((index, visible));
            return self.anchored(hits_needed);
        }
        false
    }

    /// Why no copy of the target is visible, for a refusal or a verify problem.
    pub fn nothing_visible(&self, target: &str) -> String {
        match &self.hidden {
            Some((path, layer, h)) => format!(
                "no layer holds a visible **/{target}: /{path} (layer {layer}) is hidden by {h}"
            ),
            None => format!("no layer holds a visible **/{target}"),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py";
    const SITE: &str = "usr/local/lib/python3.12/dist-packages";

    fn wanted() -> Wanted {
        Wanted {
            targets: vec![T.into()],
            companions: vec!["vllm_ascend/x.py".into()],
            packages: vec!["vllm".into()],
        }
    }

    /// One tar entry: a path written raw into the header (so `..` and friends can be had),
    /// its type, its data, and a link name.
    struct E<'a>(&'a [u8], tar::EntryType, Vec<u8>, &'a str);

    fn file(path: &str, data: &[u8]) -> E<'static> {
        E(
            Box::leak(path.as_bytes().to_vec().into_boxed_slice()),
            tar::EntryType::Regular,
            data.to_vec(),
            "",
        )
    }

    fn tar_of(entries: &[E<'_>]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for E(path, kind, data, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            h.set_size(data.len() as u64);
            if !link.is_empty() {
                h.set_link_name(link).expect("link");
            }
            if path.len() < 100 {
                h.as_gnu_mut().expect("gnu").name[..path.len()].copy_from_slice(path);
                h.set_cksum();
                b.append(&h, &data[..]).expect("append");
            } else {
                // A GNU long name entry, written by the tar crate.
                let p = std::str::from_utf8(path).expect("utf-8");
                b.append_data(&mut h, p, &data[..]).expect("append");
            }
        }
        b.into_inner().expect("tar")
    }

    fn scan_with(tar: &[u8], digest: &str, run: &Budget) -> LayerScan {
        let desc = Descriptor {
            media_type: crate::media::OCI_LAYER_TAR.into(),
            digest: digest.into(),
            size: tar.len() as u64,
            urls: Vec::new(),
        };
        scan_layer(tar, &desc, Compression::None, &wanted(), run).expect("scan")
    }

    fn scan(entries: &[E<'_>], digest: &str) -> Arc<LayerScan> {
        Arc::new(scan_with(
            &tar_of(entries),
            digest,
            &Budget::new(MAX_KEPT_PER_RUN),
        ))
    }

    fn dir(path: &str) -> E<'static> {
        E(
            Box::leak(path.as_bytes().to_vec().into_boxed_slice()),
            tar::EntryType::Directory,
            Vec::new(),
            "",
        )
    }

    fn symlink(path: &str, to: &'static str) -> E<'static> {
        E(
            Box::leak(path.as_bytes().to_vec().into_boxed_slice()),
            tar::EntryType::Symlink,
            Vec::new(),
            to,
        )
    }

    #[test]
    fn zstd_layers_with_skippable_frames_are_read_to_the_end() {
        let tar = tar_of(&[file(&format!("usr/lib/{T}"), b"x = 1\n")]);
        // Two frames and a skippable frame at the end, as zstd:chunked writes its table of contents.
        let (a, b) = tar.split_at(tar.len() / 2);
        let mut blob = zstd::stream::encode_all(a, 3).expect("zstd");
        blob.extend(zstd::stream::encode_all(b, 3).expect("zstd"));
        blob.extend(0x184D_2A50u32.to_le_bytes());
        blob.extend(4u32.to_le_bytes());
        blob.extend(b"toc!");
        let desc = Descriptor {
            media_type: crate::media::OCI_LAYER_ZSTD.into(),
            digest: "sha256:z".into(),
            size: blob.len() as u64,
            urls: Vec::new(),
        };
        let run = Budget::new(MAX_KEPT_PER_RUN);
        let s = scan_layer(&blob[..], &desc, Compression::Zstd, &wanted(), &run).expect("scan");
        assert_eq!(s.targets.len(), 1);
        assert_eq!(s.compressed_bytes, blob.len() as u64);
        // A truncated frame is an error, not a short layer.
        let cut = &blob[..blob.len() / 2];
        let short = Descriptor {
            size: cut.len() as u64,
            ..desc
        };
        assert!(scan_layer(cut, &short, Compression::Zstd, &wanted(), &run).is_err());
    }

    #[test]
    fn overlay_hides_whited_out_and_opaque_paths() {
        let mut o = Overlay::default();
        o.absorb(scan(
            &[
                file("opt/.wh.legacy", b""),
                file("usr/lib/pkg/.wh..wh..opq", b""),
            ],
            "sha256:up",
        ));
        assert!(o.hides("opt/legacy"));
        assert!(o.hides("opt/legacy/vllm/x.py"));
        assert!(!o.hides("opt/legacy2/x.py"));
        assert!(o.hides("usr/lib/pkg/a.py"));
        assert!(!o.hides("usr/lib/pkg"));
        let h = o.hider("usr/lib/pkg/a/b.py").expect("hidden");
        assert_eq!((h.at.as_str(), &h.by), ("usr/lib/pkg", &HiddenBy::Opaque));
    }

    #[test]
    fn non_directory_ancestors_hide_the_tree_below() {
        let mut o = Overlay::default();
        o.absorb(scan(
            &[
                symlink(&format!("{SITE}/vllm"), "/opt/vllm"),
                file("etc/profile.d", b"a file where a directory was\n"),
                dir("usr/share/doc"),
            ],
            "sha256:up",
        ));
        let h = o
            .hider(&format!("{SITE}/{T}"))
            .expect("hidden by the symlink");
        assert_eq!(h.at, format!("{SITE}/vllm"));
        assert_eq!(h.by, HiddenBy::NonDir(NodeKind::Symlink));
        assert!(h.to_string().contains("a symbolic link at /usr/local/lib/python3.12/dist-packages/vllm in layer sha256:up"), "{h}");
        assert_eq!(
            o.hider("etc/profile.d/x.sh").map(|h| h.by),
            Some(HiddenBy::NonDir(NodeKind::File))
        );
        // The entry itself and its siblings are not hidden; a directory hides nothing.
        assert!(!o.hides(&format!("{SITE}/vllm")));
        assert!(!o.hides(&format!("{SITE}/vllm2/x.py")));
        assert!(!o.hides("usr/share/doc/x"));
    }

    #[test]
    fn hard_links_devices_and_fifos_at_an_ancestor_hide_too() {
        for (kind, node) in [
            (tar::EntryType::Link, NodeKind::Hardlink),
            (tar::EntryType::Char, NodeKind::Device),
            (tar::EntryType::Block, NodeKind::Device),
            (tar::EntryType::Fifo, NodeKind::Fifo),
        ] {
            let link = if kind == tar::EntryType::Link {
                "etc/hostname"
            } else {
                ""
            };
            let mut o = Overlay::default();
            o.absorb(scan(
                &[E(b"usr/local/lib", kind, Vec::new(), link)],
                "sha256:up",
            ));
            assert_eq!(
                o.hider(&format!("{SITE}/{T}")).map(|h| (h.at, h.by)),
                Some(("usr/local/lib".to_owned(), HiddenBy::NonDir(node))),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn descent_refuses_a_target_shadowed_by_an_upper_symlink_or_file() {
        for (upper, what) in [
            (
                symlink(&format!("{SITE}/vllm"), "/opt/vllm"),
                "a symbolic link",
            ),
            (
                file(&format!("{SITE}/vllm/distributed"), b"x"),
                "a regular file",
            ),
        ] {
            let mut d = Descent::default();
            assert!(!d.push(2, scan(&[upper], "sha256:upper"), 1));
            let stop = d.push(
                1,
                scan(&[file(&format!("{SITE}/{T}"), b"code")], "sha256:lower"),
                1,
            );
            assert!(stop);
            let why = d.refusal.expect("refused");
            assert!(
                why.contains(&format!(
                    "/{SITE}/{T} (layer sha256:lower) is shadowed by {what}"
                )),
                "{why}"
            );
            assert!(d.hits.is_empty());
        }
    }

    #[test]
    fn descent_names_the_whiteout_that_hides_the_only_copy() {
        let mut d = Descent::default();
        d.push(
            2,
            scan(&[file(&format!("{SITE}/.wh.vllm"), b"")], "sha256:upper"),
            1,
        );
        d.push(
            1,
            scan(&[file(&format!("{SITE}/{T}"), b"code")], "sha256:lower"),
            1,
        );
        d.push(0, scan(&[file("etc/os-release", b"x")], "sha256:base"), 1);
        assert!(d.refusal.is_none() && d.hits.is_empty());
        let msg = d.nothing_visible(T);
        assert!(msg.starts_with("no layer holds a visible"), "{msg}");
        assert!(
            msg.contains(&format!(
                "is hidden by a whiteout of /{SITE}/vllm in layer sha256:upper"
            )),
            "{msg}"
        );
    }

    #[test]
    fn descent_skips_a_whited_out_decoy_and_finds_the_copy_below() {
        let mut d = Descent::default();
        d.push(3, scan(&[file("opt/.wh.legacy", b"")], "sha256:a"), 1);
        d.push(
            2,
            scan(&[file(&format!("opt/legacy/{T}"), b"old")], "sha256:b"),
            1,
        );
        let stop = d.push(
            1,
            scan(&[file(&format!("{SITE}/{T}"), b"new")], "sha256:c"),
            1,
        );
        assert!(stop && d.refusal.is_none());
        assert_eq!(d.hits[0].0, 1);
        assert_eq!(d.hits[0].1[0].path, format!("{SITE}/{T}"));
    }

    #[test]
    fn unsafe_paths_are_refusals_naming_layer_and_path() {
        for raw in [
            &b"../etc/passwd"[..],
            b"/../../vllm/x.py",
            b"usr/../../x",
            b"usr/lib/.wh..",
        ] {
            let s = scan(
                &[
                    file("etc/ok", b"x"),
                    E(raw, tar::EntryType::Regular, vec![], ""),
                ],
                "sha256:bad",
            );
            let why = s.refusal.as_deref().expect("refused");
            assert!(why.starts_with("layer sha256:bad: the tar path"), "{why}");
            assert!(
                why.contains(&format!("{:?}", String::from_utf8_lossy(raw))),
                "{why}"
            );
            assert_eq!(s.kept, 0);
        }
        assert_eq!(unsafe_path(b"a/b\0c"), Some("holds a NUL byte"));
        assert_eq!(unsafe_path(b"./usr/lib/x..y/.wh.a"), None);
        assert_eq!(unsafe_path(b"/usr/lib/x"), None);
    }

    #[test]
    fn a_symlink_above_the_target_in_its_own_layer_is_refused() {
        let s = scan(
            &[
                symlink(&format!("{SITE}/vllm/distributed"), "elsewhere"),
                file(&format!("{SITE}/{T}"), b"code"),
            ],
            "sha256:same",
        );
        let why = s.refusal.as_deref().expect("refused");
        assert!(why.contains("is a symbolic link and"), "{why}");
    }

    #[test]
    fn kept_bytes_are_capped_per_layer_and_the_refusal_keeps_nothing() {
        let big = vec![b'x'; 6 * 1024 * 1024];
        let entries: Vec<E<'_>> = (0..8)
            .map(|i| file(&format!("{SITE}/vllm-0.{i}.dist-info/METADATA"), &big))
            .collect();
        let run = Budget::new(MAX_KEPT_PER_RUN);
        let s = scan_with(&tar_of(&entries), "sha256:bomb", &run);
        let why = s.refusal.as_deref().expect("refused");
        assert!(
            why.starts_with(
                "layer sha256:bomb: the scan would keep more than the 24.0 MiB kept per layer"
            ),
            "{why}"
        );
        assert!(why.contains("4 version or guard file(s)"), "{why}");
        assert!(s.files.is_empty() && s.kept == 0);
        assert_eq!(run.used(), 0, "a refused scan gives its bytes back");

        let one = scan_with(
            &tar_of(&[
                file("a/vllm/x.py", b""),
                file(&format!("{SITE}/{T}"), &vec![b'y'; 17 * 1024 * 1024]),
            ]),
            "sha256:huge",
            &run,
        );
        assert!(one
            .refusal
            .as_deref()
            .expect("refused")
            .contains("more than the 16.0 MiB kept per file"));
    }

    #[test]
    fn kept_bytes_are_capped_per_run() {
        let run = Budget::new(MAX_KEPT_PER_RUN);
        let big = vec![b'x'; 10 * 1024 * 1024];
        let mut refused = None;
        for n in 0..4 {
            let entries: Vec<E<'_>> = (0..2)
                .map(|i| file(&format!("{SITE}/vllm-{n}.{i}.dist-info/METADATA"), &big))
                .collect();
            let s = scan_with(&tar_of(&entries), &format!("sha256:l{n}"), &run);
            if s.refusal.is_some() {
                refused = Some((n, s.refusal.clone().unwrap_or_default()));
                break;
            }
            assert_eq!(s.files.len(), 2);
        }
        let (n, why) = refused.expect("the third layer passes the run's cap");
        assert_eq!(n, 2);
        assert!(why.contains("kept per run"), "{why}");
        assert!(run.used() <= MAX_KEPT_PER_RUN);
    }

    #[test]
    fn an_endless_tar_header_extension_is_refused() {
        let mut h = tar::Header::new_ustar();
        h.set_path("PaxHeader").expect("path");
        h.set_entry_type(tar::EntryType::XHeader);
        let record = vec![b'a'; 3 * 1024 * 1024];
        h.set_size(record.len() as u64);
        h.set_cksum();
        let mut b = tar::Builder::new(Vec::new());
        b.append(&h, &record[..]).expect("append");
        let mut f = tar::Header::new_ustar();
        f.set_path("etc/x").expect("path");
        f.set_size(0);
        f.set_cksum();
        b.append(&f, &[][..]).expect("append");
        let s = scan_with(
            &b.into_inner().expect("tar"),
            "sha256:pax",
            &Budget::new(MAX_KEPT_PER_RUN),
        );
        assert!(
            s.refusal
                .as_deref()
                .expect("refused")
                .contains("tar header extension"),
            "{:?}",
            s.refusal
        );
    }

    #[test]
    fn the_same_path_twice_keeps_the_later_entry() {
        let s = scan(
            &[
                file(&format!("{SITE}/{T}"), b"first"),
                file(&format!("{SITE}/{T}"), b"second"),
            ],
            "sha256:twice",
        );
        assert_eq!(s.targets.len(), 1);
        assert_eq!(s.targets[0].content.as_slice(), b"second");
    }

    #[test]
    fn suffix_matches_whole_components() {
        assert!(has_suffix("usr/lib/vllm/a/b.py", "vllm/a/b.py"));
        assert!(has_suffix("vllm/a/b.py", "vllm/a/b.py"));
        assert!(!has_suffix("usr/lib/notvllm/a/b.py", "vllm/a/b.py"));
        assert_eq!(normalize("./usr//lib/./x/"), "usr/lib/x");
    }

    #[test]
    fn versions_from_metadata_and_version_py() {
        assert_eq!(
            version_from_file(
                "a/vllm-0.27.1.dist-info/METADATA",
                b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.27.1\n\nbody Version: 9"
            ),
            Some("0.27.1".into())
        );
        assert_eq!(
            version_from_file(
                "w/vllm/_version.py",
                b"# x\n__version__ = version = '0.20.2'\n"
            ),
            Some("0.20.2".into())
        );
        assert_eq!(
            version_from_file("w/vllm/_version.py", b"version_tuple: tuple = (0, 1)\n"),
            None
        );
    }
}
