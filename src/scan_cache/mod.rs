//! The scan cache: what a layer scan found, kept on disk, so `apply` after `plan` (or a second
//! `plan`) reads no layer again; on real runner images that is tens of GB per backend.
//!
//! An entry is keyed by the layer (digest, size, compression), by what was looked for (the
//! patch's target, guards and package) and by the build of this tool (a scan's meaning, and
//! the hash of its entry index, may change between builds), and holds only what the scan
//! found: the target entries with their headers and content, the `.pyc` paths, the few kept
//! files, the whiteouts and opaque directories, the index of non-directory entries (hashes,
//! for overlay hiding), a refusal if the layer was unusable, and the layer's size. A scan of any size is kept (a
//! distributions scan holds every `RECORD`, torch's among them); the folder is bounded on disk
//! (least recently used entries go first). An entry is written only after the layer was read
//! to its end and its digest and size checked (`scan::scan_layer` returned). On reading, an entry must name
//! the same layer and the same key and carry the sha256 of its own body; anything else (a
//! truncated, edited or foreign file, another format) is ignored, the layer is read again,
//! and the entry rewritten. The checksum detects corruption and mix-ups, not a deliberate
//! forgery: the cache directory is trusted as much as the user's other files.
//!
//! `plan` and `apply` use it (`--cache-dir`, default `$XDG_CACHE_HOME/runner-patch/scans` or
//! `~/.cache/runner-patch/scans`; `--no-cache`); `verify` never does, so its checks stay
//! independent of earlier runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::media::{Compression, Descriptor};
use crate::scan::{EntryKind, FileEntry, LayerScan, Wanted};

/// Bumped whenever the entry layout or the meaning of a scan changes. Entries of an earlier
/// format are never read; their folder is removed by the first store of this one.
const FORMAT: u64 = 2;

/// What the entries of one cache folder may take on disk together, unless
/// `RUNNER_PATCH_SCAN_CACHE_MAX_MB` says otherwise: past it, the least recently used entries
/// are removed after a store (down to nine tenths of it).
pub const DEFAULT_MAX_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// The default cache folder: under the user's cache directory, when there is one.
pub fn default_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("runner-patch").join("scans"))
}

/// Where a run keeps its scans, if anywhere: owned by the run's layer reader, so two runs in
/// one process (tests, a library user) each have their own.
#[derive(Debug, Clone, Default)]
pub struct ScanCache {
    dir: Option<PathBuf>,
}

impl ScanCache {
    /// `dir`, else the default; `off` (`--no-cache`) keeps nothing.
    pub fn at(off: bool, dir: Option<PathBuf>) -> Self {
        let dir = if off { None } else { dir.or_else(default_dir) };
        match &dir {
            Some(d) => tracing::debug!("scan cache in {}", d.display()),
            None => tracing::debug!("no scan cache"),
        }
        ScanCache { dir }
    }

    /// No cache (what `verify` uses, so its checks stay independent of earlier runs).
    pub fn off() -> Self {
        ScanCache { dir: None }
    }

    /// The cached scan of a layer, when a valid entry for exactly this layer and key exists.
    pub fn load(
        &self,
        desc: &Descriptor,
        compression: Compression,
        wanted: &Wanted,
    ) -> Option<LayerScan> {
        load(self.dir.as_deref()?, desc, compression, wanted)
    }

    /// Records a scan. Call only with the result of a complete, verified read of the layer.
    pub fn store(
        &self,
        desc: &Descriptor,
        compression: Compression,
        wanted: &Wanted,
        scan: &LayerScan,
    ) {
        if let Some(dir) = &self.dir {
            store(dir, desc, compression, wanted, scan);
        }
    }
}

/// What was looked for and by which build, as one string: two scans with the same key find
/// the same things.
pub fn wanted_key(wanted: &Wanted) -> String {
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v.dedup();
        v.join(",")
    };
    let mut key = format!(
        "tool={}\ntargets={}\npackages={}\ncompanions={}",
        crate::VERSION,
        sorted(&wanted.targets),
        sorted(&wanted.packages),
        sorted(&wanted.companions)
    );
    // Exact paths are named only when there are some, so the keys of other scans stay as they were.
    if !wanted.paths.is_empty() {
        key.push_str(&format!("\npaths={}", sorted(&wanted.paths)));
    }
    if !wanted.resolved.is_empty() {
        key.push_str(&format!("\nresolved={}", sorted(&wanted.resolved)));
    }
    if wanted.dists {
        key.push_str("\ndists=1");
    }
    key
}

/// The biggest entry written or read: everything a complete scan of one layer may keep (its own
/// budget and all the distribution metadata a run may keep), as base64, plus its index. A
/// scan of any size that finished is cached; a bigger file is not one this tool wrote.
const MAX_ENTRY_BYTES: u64 =
    (crate::scan::MAX_KEPT_PER_LAYER + crate::scan::MAX_DIST_KEPT_PER_RUN) * 3 / 2 + (1 << 20);

/// The bound of a cache folder (`RUNNER_PATCH_SCAN_CACHE_MAX_MB`, else [`DEFAULT_MAX_BYTES`]).
fn max_bytes() -> u64 {
    std::env::var("RUNNER_PATCH_SCAN_CACHE_MAX_MB")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_MAX_BYTES, |mb| mb.saturating_mul(1024 * 1024))
}

fn compression_name(c: Compression) -> &'static str {
    match c {
        Compression::Gzip => "gzip",
        Compression::Zstd => "zstd",
        Compression::None => "none",
    }
}

/// The entry's file: one per layer and key, named by the sha256 of both.
fn entry_path(dir: &Path, desc: &Descriptor, compression: Compression, key: &str) -> PathBuf {
    let name = crate::digest::sha256(
        format!(
            "runner-patch scan cache {FORMAT}\n{}\n{}\n{}\n{key}",
            desc.digest,
            desc.size,
            compression_name(compression)
        )
        .as_bytes(),
    );
    let hex = name.trim_start_matches("sha256:");
    dir.join(format!("v{FORMAT}")).join(format!("{hex}.json"))
}

fn load(
    dir: &Path,
    desc: &Descriptor,
    compression: Compression,
    wanted: &Wanted,
) -> Option<LayerScan> {
    let key = wanted_key(wanted);
    let path = entry_path(dir, desc, compression, &key);
    let size = match std::fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::debug!("scan cache entry {} unreadable: {e}", path.display());
            return None;
        }
    };
    if size > MAX_ENTRY_BYTES {
        tracing::warn!(
            "scan cache entry for layer {} ignored ({size} bytes, more than an entry holds); reading the layer again",
            desc.digest
        );
        return None;
    }
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            tracing::debug!("scan cache entry {} unreadable: {e}", path.display());
            return None;
        }
    };
    match decode(&bytes, desc, compression, &key) {
        Ok(scan) => {
            touch(&path);
            tracing::debug!("layer {}: scan from the cache", desc.digest);
            Some(scan)
        }
        Err(why) => {
            tracing::warn!(
                "scan cache entry for layer {} ignored ({why}); reading the layer again",
                desc.digest
            );
            None
        }
    }
}

fn store(
    dir: &Path,
    desc: &Descriptor,
    compression: Compression,
    wanted: &Wanted,
    scan: &LayerScan,
) {
    let key = wanted_key(wanted);
    let path = entry_path(dir, desc, compression, &key);
    let entry = encode(desc, compression, &key, scan);
    if entry.len() as u64 > MAX_ENTRY_BYTES {
        tracing::debug!("layer {}: scan too big to cache", desc.digest);
        return;
    }
    if let Err(e) = write_atomic(&path, &entry) {
        tracing::debug!("scan cache entry {} not written: {e}", path.display());
        return;
    }
    evict(dir, &path, max_bytes());
}

/// Keeps the folder within `max` bytes: the entries least recently written or read go first
/// (down to nine tenths of `max`, so that not every store evicts), never `just_written`.
/// Folders of earlier formats are removed. Best effort: another run may be removing too.
fn evict(dir: &Path, just_written: &Path, max: u64) {
    for old in 1..FORMAT {
        let _ = std::fs::remove_dir_all(dir.join(format!("v{old}")));
    }
    let Ok(read) = std::fs::read_dir(dir.join(format!("v{FORMAT}"))) else {
        return;
    };
    let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = read
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let used = m.modified().ok()?;
            (m.is_file() && e.path().extension().is_some_and(|x| x == "json"))
                .then(|| (used, m.len(), e.path()))
        })
        .collect();
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    if total <= max {
        return;
    }
    entries.sort();
    let goal = max / 10 * 9;
    for (_, len, path) in entries {
        if total <= goal {
            break;
        }
        if path != just_written && std::fs::remove_file(&path).is_ok() {
            tracing::debug!("scan cache: removed {} ({len} bytes)", path.display());
            total -= len;
        }
    }
}

/// Marks an entry as just used, so eviction keeps it longest (best effort).
fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let parent = path
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent directory"))?;
    std::fs::create_dir_all(parent)?;
    crate::fsutil::write_atomic(path, bytes)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn kind_json(k: &EntryKind) -> Value {
    match k {
        EntryKind::Regular => json!({"regular": null}),
        EntryKind::Symlink(t) => json!({"symlink": t}),
        EntryKind::Hardlink(t) => json!({"hardlink": t}),
        EntryKind::Other(t) => json!({"other": t}),
    }
}

/// The entry: the sha256 of the body's exact bytes on the first line, then the body (layer,
/// key, scan) as JSON, so reading it needs no second copy of the body.
fn encode(desc: &Descriptor, compression: Compression, key: &str, scan: &LayerScan) -> Vec<u8> {
    let targets: Vec<Value> = scan
        .targets
        .iter()
        .map(|t| {
            json!({
                "path": t.path, "kind": kind_json(&t.kind), "mode": t.mode, "uid": t.uid,
                "gid": t.gid, "uname": t.uname, "gname": t.gname, "mtime": t.mtime,
                "content": b64(&t.content),
            })
        })
        .collect();
    let files: BTreeMap<&String, String> = scan.files.iter().map(|(p, c)| (p, b64(c))).collect();
    let body = json!({
        "format": FORMAT,
        "layer": desc.digest,
        "size": desc.size,
        "compression": compression_name(compression),
        "key": key,
        "scan": {
            "digest": scan.digest,
            "targets": targets,
            "pycs": scan.pycs,
            "files": files,
            "whiteouts": scan.whiteouts,
            "opaques": scan.opaques,
            "index": scan.index_keys(),
            "links": scan.links.iter().map(|(k, t)| json!([k, t])).collect::<Vec<_>>(),
            "dirs": scan.dirs,
            "pythons": scan.pythons,
            "refusal": scan.refusal,
            "kept": scan.kept,
            "compressed_bytes": scan.compressed_bytes,
        },
    })
    .to_string();
    let sum = crate::digest::sha256(body.as_bytes());
    format!("{sum}\n{body}").into_bytes()
}

/// An entry's body, once its checksum, format, layer and key are those of this scan.
fn open_entry(
    bytes: &[u8],
    desc: &Descriptor,
    compression: Compression,
    key: &str,
) -> Result<Value, String> {
    let newline = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or("no checksum line")?;
    let (sum, body) = (&bytes[..newline], &bytes[newline + 1..]);
    if sum != crate::digest::sha256(body).as_bytes() {
        return Err("its checksum does not match its content".into());
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| "body is not JSON".to_owned())?;
    if v["format"].as_u64() != Some(FORMAT) {
        return Err(format!("format {} is not {FORMAT}", v["format"]));
    }
    if v["layer"].as_str() != Some(desc.digest.as_str())
        || v["size"].as_u64() != Some(desc.size)
        || v["compression"].as_str() != Some(compression_name(compression))
    {
        return Err(format!("it belongs to layer {}", v["layer"]));
    }
    if v["key"].as_str() != Some(key) {
        return Err("it was made for another patch".into());
    }
    Ok(v)
}

fn bad(what: &str) -> String {
    format!("malformed {what}")
}

fn text(x: &Value, what: &str) -> Result<String, String> {
    x.as_str().map(str::to_owned).ok_or_else(|| bad(what))
}

fn num(x: &Value, what: &str) -> Result<u64, String> {
    x.as_u64().ok_or_else(|| bad(what))
}

fn unb64(x: &Value, what: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(x.as_str().ok_or_else(|| bad(what))?)
        .map_err(|_| bad(what))
}

fn strings(x: &Value, what: &str) -> Result<Vec<String>, String> {
    x.as_array()
        .ok_or_else(|| bad(what))?
        .iter()
        .map(|e| text(e, what))
        .collect()
}

/// The kept entries of wanted files.
fn targets_of(s: &Value) -> Result<Vec<FileEntry>, String> {
    let mut targets = Vec::new();
    for t in s["targets"].as_array().ok_or_else(|| bad("targets"))? {
        let k = t["kind"].as_object().ok_or_else(|| bad("kind"))?;
        let kind = match k.iter().next() {
            Some((n, _)) if n == "regular" => EntryKind::Regular,
            Some((n, x)) if n == "symlink" => EntryKind::Symlink(text(x, "kind")?),
            Some((n, x)) if n == "hardlink" => EntryKind::Hardlink(text(x, "kind")?),
            Some((n, x)) if n == "other" => EntryKind::Other(text(x, "kind")?),
            _ => return Err(bad("kind")),
        };
        let opt = |x: &Value| x.as_str().map(str::to_owned);
        targets.push(FileEntry {
            path: text(&t["path"], "path")?,
            kind,
            mode: u32::try_from(num(&t["mode"], "mode")?).map_err(|_| bad("mode"))?,
            uid: num(&t["uid"], "uid")?,
            gid: num(&t["gid"], "gid")?,
            uname: opt(&t["uname"]),
            gname: opt(&t["gname"]),
            mtime: num(&t["mtime"], "mtime")?,
            content: Arc::new(unb64(&t["content"], "content")?),
        });
    }
    Ok(targets)
}

/// A sorted list of numbers (an index of hashed paths); absent: empty.
fn sorted_keys(x: &Value, what: &str) -> Result<Vec<u64>, String> {
    let keys: Vec<u64> = x
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|k| num(k, what))
        .collect::<Result<_, _>>()?;
    keys.windows(2)
        .all(|w| w[0] <= w[1])
        .then_some(keys)
        .ok_or_else(|| bad(what))
}

/// Reads an entry back; `Err` names why it cannot be trusted for this layer and key.
fn decode(
    bytes: &[u8],
    desc: &Descriptor,
    compression: Compression,
    key: &str,
) -> Result<LayerScan, String> {
    let v = open_entry(bytes, desc, compression, key)?;
    let s = &v["scan"];
    let targets = targets_of(s)?;
    let mut files = BTreeMap::new();
    for (p, c) in s["files"].as_object().ok_or_else(|| bad("files"))? {
        files.insert(p.clone(), Arc::new(unb64(c, "files")?));
    }
    let compressed_bytes = num(&s["compressed_bytes"], "compressed_bytes")?;
    if compressed_bytes != desc.size || s["digest"].as_str() != Some(desc.digest.as_str()) {
        return Err(bad("layer fields"));
    }
    let kept = num(&s["kept"], "kept")?;
    let index = sorted_keys(&s["index"], "index")?;
    let refusal = match &s["refusal"] {
        Value::Null => None,
        r => Some(text(r, "refusal")?),
    };
    let mut scan = LayerScan::default();
    scan.digest = desc.digest.clone();
    scan.targets = targets;
    scan.pycs = strings(&s["pycs"], "pycs")?.into_iter().collect();
    scan.files = files;
    scan.whiteouts = strings(&s["whiteouts"], "whiteouts")?.into_iter().collect();
    scan.opaques = strings(&s["opaques"], "opaques")?.into_iter().collect();
    scan.set_index_keys(index);
    // What a scan for exact paths keeps to resolve links (scan::links).
    for pair in s["links"].as_array().map(Vec::as_slice).unwrap_or_default() {
        scan.links
            .insert(num(&pair[0], "links")?, text(&pair[1], "links")?);
    }
    scan.dirs = sorted_keys(&s["dirs"], "dirs")?;
    for m in s["pythons"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        scan.pythons
            .insert(u32::try_from(num(m, "pythons")?).map_err(|_| bad("pythons"))?);
    }
    scan.refusal = refusal;
    scan.kept = kept;
    scan.compressed_bytes = compressed_bytes;
    Ok(scan)
}

#[cfg(test)]
mod tests;
