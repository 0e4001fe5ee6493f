//! One wheel file, opened and checked as input from outside before anything is installed from
//! it: its own sha256 against the lock first, then one streamed pass over every entry (names
//! that stay inside the install scheme, no name twice, deflate or stored only, inflated sizes
//! as the zip headers declare, each sha256 and size as the wheel's `RECORD` says, no row
//! without an entry and no entry without a row), `WHEEL` (version 1.x, root-is-purelib) and
//! `METADATA` (name and version as the file name says). What install needs is kept (the entry
//! list with where each entry's bytes lie, the small `.dist-info` files); no entry is ever
//! held whole in memory, so a wheel of hundreds of MB is checked in a few MB.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::Digest;

use super::record::{self, Row};
use super::requires;
use crate::patch::verdict::Opener;

/// The `.dist-info` files kept in memory (none is larger in any real wheel).
const MAX_KEPT: u64 = 16 << 20;
/// The scheme keys a `<name>-<version>.data/` directory may hold.
pub const DATA_KEYS: [&str; 5] = ["purelib", "platlib", "headers", "scripts", "data"];

/// One file of the archive: its name, what its bytes are, and where they lie in the file.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    pub size: u64,
    /// Hex sha256 of the inflated bytes.
    pub sha256: String,
    /// Whether the zip's unix mode has an executable bit (pip then installs it 0755).
    pub executable: bool,
    offset: u64,
    compressed: u64,
    deflated: bool,
}

/// A checked wheel: what install reads of it.
#[derive(Debug, Clone)]
pub struct Wheel {
    pub path: PathBuf,
    pub filename: String,
    /// `Name` and `Version` as its `METADATA` writes them.
    pub name: String,
    pub version: String,
    /// The `.dist-info` directory in the archive (`a-1.0.dist-info`).
    pub info_dir: String,
    /// `Root-Is-Purelib: true`: the root goes to purelib, else platlib.
    pub purelib: bool,
    /// Every file of the archive, in archive order (directories left out).
    pub entries: Vec<Entry>,
    /// The wheel's `RECORD` rows, as written.
    pub record: Vec<Row>,
    pub metadata: Vec<u8>,
    pub entry_points: Option<Vec<u8>>,
}

/// The value of the first header `key` (case-insensitive) of an email-style file (`WHEEL`,
/// `METADATA`), continuation lines joined; the body after the first blank line is not read.
pub fn header(bytes: &[u8], key: &str) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut found: Option<String> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some(v) = found.as_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
            continue;
        }
        if found.is_some() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.trim().eq_ignore_ascii_case(key) {
                found = Some(v.trim().to_owned());
            }
        }
    }
    found
}

/// Whether an archive name is a relative, normalized path that cannot climb out of the dir it
/// is unpacked to (and that a layer can hold).
fn check_name(name: &str) -> Result<(), String> {
    if name.starts_with('/') || name.contains('\\') || name.contains('\0') {
        return Err(format!(
            "the entry {name:?} is an absolute or non-POSIX name"
        ));
    }
    for part in name.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(format!(
                "the entry {name:?} is not a normalized relative name (empty, `.` or `..` part)"
            ));
        }
        if part.starts_with(".wh.") {
            return Err(format!("the entry {name:?} names a whiteout (.wh.)"));
        }
    }
    if let Some((top, rest)) = name.split_once('/') {
        if top.ends_with(".data") {
            let (key, sub) = rest.split_once('/').unwrap_or((rest, ""));
            if !DATA_KEYS.contains(&key) || sub.is_empty() {
                return Err(format!(
                    "the entry {name:?} is not `<scheme key>/<path>` below {top}/ (keys: {})",
                    DATA_KEYS.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// Whether two version strings are the same PEP 440 version (`1.0` is `1.0.0`); strings that
/// do not parse must be equal.
pub fn same_version(a: &str, b: &str) -> bool {
    use std::str::FromStr;
    match (
        pep440_rs::Version::from_str(a),
        pep440_rs::Version::from_str(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The folder wheels fetched by URL are kept in: `$RUNNER_PATCH_CACHE`, else
/// `$XDG_CACHE_HOME/runner-patch/inputs`, else `~/.cache/runner-patch/inputs`.
pub fn cache_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = env("RUNNER_PATCH_CACHE") {
        return d;
    }
    if let Some(d) = env("XDG_CACHE_HOME") {
        return d.join("runner-patch").join("inputs");
    }
    env("HOME")
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".cache")
        .join("runner-patch")
        .join("inputs")
}

/// Where the wheel of hex sha256 `sha256` is kept once fetched.
pub fn cached(sha256: &str) -> PathBuf {
    cache_dir().join(format!("{}.whl", sha256.to_ascii_lowercase()))
}

/// The one `.dist-info` directory at the archive's top whose name is the dist's.
fn info_dir(names: &[String], normalized: &str) -> Result<String, String> {
    let dirs: BTreeSet<&str> = names
        .iter()
        .filter_map(|n| n.split_once('/').map(|(top, _)| top))
        .filter(|top| top.ends_with(".dist-info"))
        .collect();
    let ours: Vec<&&str> = dirs
        .iter()
        .filter(|d| {
            let stem = d.trim_end_matches(".dist-info");
            let name = stem.rsplit_once('-').map_or(stem, |(n, _)| n);
            requires::normalize(name) == normalized
        })
        .collect();
    match ours.as_slice() {
        [one] => Ok((**one).to_owned()),
        [] => Err(format!(
            "it holds no {normalized}-<version>.dist-info directory"
        )),
        _ => Err(format!(
            "it holds {} .dist-info directories of {normalized}",
            ours.len()
        )),
    }
}

/// Opens and checks the wheel at `path`, named `filename` in the lock with hex `sha256`, of
/// the distribution `dist` at `version` (as the file name says them). `Err` is one line.
pub fn open(
    path: &Path,
    filename: &str,
    sha256: &str,
    dist: &str,
    version: &str,
) -> Result<Wheel, String> {
    let got = crate::digest::file_hex(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !got.eq_ignore_ascii_case(sha256) {
        return Err(format!(
            "wheel {filename} has sha256 {got}, the lock names {}",
            sha256.to_ascii_lowercase()
        ));
    }
    read(path, filename, dist, version).map_err(|e| format!("wheel {filename}: {e}"))
}

/// The first entry name a wheel gives twice, read from its local headers in order (the
/// archive's index keeps one entry per name, so it cannot say which).
fn first_repeat(path: &Path) -> String {
    let Ok(file) = File::open(path) else {
        return String::new();
    };
    let mut reader = BufReader::new(file);
    let mut seen = BTreeSet::new();
    while let Ok(Some(entry)) = zip::read::read_zipfile_from_stream(&mut reader) {
        let name: String = entry.name().map(|n| n.into_owned()).unwrap_or_default();
        if !seen.insert(name.clone()) {
            return name;
        }
    }
    String::new()
}

/// The entries' pass and the checks after it (the file's own hash already checked).
fn read(path: &Path, filename: &str, dist: &str, version: &str) -> Result<Wheel, String> {
    let file = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut zip = zip::ZipArchive::new(BufReader::new(file))
        .map_err(|e| format!("not a readable zip archive: {e}"))?;
    if zip.has_duplicate_names() {
        return Err(format!("the entry {} is given twice", first_repeat(path)));
    }
    let names: Vec<String> = zip
        .file_names()
        .map(|n| n.map(|n| n.into_owned()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("an entry name cannot be read: {e}"))?;
    let info = info_dir(&names, &requires::normalize(dist))?;
    let mut kept: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut entries = Vec::new();
    for i in 0..zip.len() {
        if let Some(e) = read_entry(&mut zip, i, &info, &mut kept)? {
            entries.push(e);
        }
    }
    let take = |kept: &mut BTreeMap<String, Vec<u8>>, f: &str| kept.remove(&format!("{info}/{f}"));
    let wheel_file = take(&mut kept, "WHEEL").ok_or(format!("{info}/WHEEL is missing"))?;
    let metadata = take(&mut kept, "METADATA").ok_or(format!("{info}/METADATA is missing"))?;
    let record_bytes = take(&mut kept, "RECORD").ok_or(format!("{info}/RECORD is missing"))?;
    let entry_points = take(&mut kept, "entry_points.txt");
    let purelib = check_wheel_file(&wheel_file, &info)?;
    let (name, meta_version) = check_metadata(&metadata, &info, dist, version)?;
    let record = record::parse(&record_bytes, &format!("{info}/RECORD"))?;
    check_record(&record, &entries, &info)?;
    Ok(Wheel {
        path: path.to_owned(),
        filename: filename.to_owned(),
        name,
        version: meta_version,
        info_dir: info,
        purelib,
        entries,
        record,
        metadata,
        entry_points,
    })
}

/// Reads entry `i` through a hasher, bounded by its declared size + 1; keeps the small
/// `.dist-info` files install reads. `None` for a directory.
fn read_entry(
    zip: &mut zip::ZipArchive<BufReader<File>>,
    i: usize,
    info: &str,
    kept: &mut BTreeMap<String, Vec<u8>>,
) -> Result<Option<Entry>, String> {
    let mut f = zip
        .by_index(i)
        .map_err(|e| format!("entry {i} cannot be read: {e}"))?;
    let name = f
        .name()
        .map_err(|e| format!("entry {i} has no readable name: {e}"))?
        .into_owned();
    if name.ends_with('/') {
        check_name(name.trim_end_matches('/'))?;
        return Ok(None);
    }
    check_name(&name)?;
    let deflated = match f.compression() {
        zip::CompressionMethod::Stored => false,
        zip::CompressionMethod::Deflated => true,
        m => {
            return Err(format!(
                "the entry {name:?} is compressed with {m:?} (only deflate and stored are read)"
            ))
        }
    };
    let size = f.size();
    let keep = name
        .strip_prefix(info)
        .and_then(|r| r.strip_prefix('/'))
        .is_some_and(|r| matches!(r, "WHEEL" | "METADATA" | "RECORD" | "entry_points.txt"));
    if keep && size > MAX_KEPT {
        return Err(format!(
            "{name} declares {size} bytes, more than {MAX_KEPT} for a metadata file"
        ));
    }
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut small = Vec::new();
    let mut read: u64 = 0;
    let mut limited = (&mut f).take(size.saturating_add(1));
    loop {
        let n = limited
            .read(&mut buf)
            .map_err(|e| format!("the entry {name:?} cannot be inflated: {e}"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        if keep {
            small.extend_from_slice(&buf[..n]);
        }
        read += n as u64;
    }
    if read != size {
        return Err(format!(
            "the entry {name:?} inflates to {}{read} bytes, its zip header declares {size}",
            if read > size { "more than " } else { "" }
        ));
    }
    let offset = f
        .data_start()
        .ok_or(format!("the entry {name:?} has no data offset"))?;
    let executable = f.unix_mode().is_some_and(|m| m & 0o111 != 0);
    let compressed = f.compressed_size();
    drop(f);
    if keep {
        kept.insert(name.clone(), small);
    }
    Ok(Some(Entry {
        name,
        size,
        sha256: hex::encode(hasher.finalize()),
        executable,
        offset,
        compressed,
        deflated,
    }))
}

/// `WHEEL`: `Wheel-Version: 1.x`; returns `Root-Is-Purelib`.
fn check_wheel_file(bytes: &[u8], info: &str) -> Result<bool, String> {
    let v = header(bytes, "Wheel-Version").ok_or(format!("{info}/WHEEL has no Wheel-Version"))?;
    if v.split('.').next() != Some("1") {
        return Err(format!("{info}/WHEEL: Wheel-Version {v} is not 1.x"));
    }
    Ok(header(bytes, "Root-Is-Purelib").is_some_and(|r| r.eq_ignore_ascii_case("true")))
}

/// `METADATA`: its name and version must be the file name's (PEP 503 names, PEP 440 versions).
fn check_metadata(
    bytes: &[u8],
    info: &str,
    dist: &str,
    version: &str,
) -> Result<(String, String), String> {
    let name = header(bytes, "Name").ok_or(format!("{info}/METADATA has no Name"))?;
    let ver = header(bytes, "Version").ok_or(format!("{info}/METADATA has no Version"))?;
    if requires::normalize(&name) != requires::normalize(dist) {
        return Err(format!(
            "{info}/METADATA names {name}, the file name {dist}"
        ));
    }
    if !same_version(&ver, version) {
        return Err(format!(
            "{info}/METADATA says version {ver}, the file name {version}"
        ));
    }
    Ok((name, ver))
}

/// Every entry listed once with its sha256 and size (`RECORD` and its signatures excepted),
/// and no row for a path the archive does not hold.
fn check_record(rows: &[Row], entries: &[Entry], info: &str) -> Result<(), String> {
    let by_name: BTreeMap<&str, &Entry> = entries.iter().map(|e| (e.name.as_str(), e)).collect();
    let unhashed = [
        format!("{info}/RECORD"),
        format!("{info}/RECORD.jws"),
        format!("{info}/RECORD.p7s"),
    ];
    let mut listed = BTreeSet::new();
    for r in rows {
        if !listed.insert(r.path.as_str()) {
            return Err(format!("{info}/RECORD lists {} twice", r.path));
        }
        let Some(e) = by_name.get(r.path.as_str()) else {
            return Err(format!(
                "{info}/RECORD lists {}, which the archive does not hold",
                r.path
            ));
        };
        if unhashed.contains(&r.path) && r.hash.is_empty() {
            continue;
        }
        let Some(hex) = r.sha256_hex() else {
            return Err(format!(
                "{info}/RECORD gives {} no sha256 ({:?})",
                r.path, r.hash
            ));
        };
        if hex != e.sha256 || r.size() != Some(e.size) {
            return Err(format!(
                "{} has sha256 {} and {} bytes, {info}/RECORD says {hex} and {:?}",
                r.path, e.sha256, e.size, r.size
            ));
        }
    }
    if let Some(e) = entries.iter().find(|e| !listed.contains(e.name.as_str())) {
        return Err(format!("{info}/RECORD does not list {}", e.name));
    }
    Ok(())
}

impl Wheel {
    /// Opens the inflated bytes of `e` afresh from the wheel file (the layer writer checks
    /// them against the entry's size and sha256).
    pub fn opener(&self, e: &Entry) -> Opener {
        let path = self.path.clone();
        let (offset, len, deflated) = (e.offset, e.compressed, e.deflated);
        Arc::new(move || {
            let mut f = File::open(&path)?;
            f.seek(SeekFrom::Start(offset))?;
            let raw = BufReader::new(f).take(len);
            Ok(if deflated {
                Box::new(flate2::bufread::DeflateDecoder::new(raw))
            } else {
                Box::new(raw)
            })
        })
    }

    /// The bytes of a small entry (a script to rewrite), read whole; refused above 16 MiB.
    pub fn read_small(&self, e: &Entry) -> Result<Vec<u8>, String> {
        if e.size > MAX_KEPT {
            return Err(format!(
                "{} is {} bytes, too large a script to rewrite",
                e.name, e.size
            ));
        }
        let mut out = Vec::new();
        (self.opener(e))()
            .and_then(|mut r| r.read_to_end(&mut out))
            .map_err(|err| format!("wheel {}: {}: {err}", self.filename, e.name))?;
        Ok(out)
    }
}
