//! Layer scan: reads one compressed layer as a stream (inflate -> tar), with the whiteouts of the
//! layers above it, and reports what the container would see of the files a patch cares about.
//! Nothing is buffered but the few small files it is asked for; every layer is read to its end so
//! that its digest and size are checked before anything found in it is trusted.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{self, Read};

use flate2::read::MultiGzDecoder;

use crate::media::{Compression, Descriptor};

/// The biggest target or companion file kept in memory (real ones are tens of KiB).
const MAX_KEPT_FILE: u64 = 16 * 1024 * 1024;

/// What to look for, as path suffixes matched on whole components.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// The file to patch, e.g. `vllm/distributed/.../multi_connector.py`.
    pub target: String,
    /// Small files read for their content (guards), by suffix.
    pub companions: Vec<String>,
    /// Distribution name whose version files are collected (`<pkg>-*.dist-info/METADATA`,
    /// `<pkg>/_version.py`).
    pub package: String,
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
    pub content: Vec<u8>,
}

/// What one layer holds of interest, and its verified digest.
#[derive(Debug, Clone, Default)]
pub struct LayerScan {
    pub targets: Vec<FileEntry>,
    /// Visible `__pycache__/<stem>.*.pyc` paths beside any copy of the target.
    pub pycs: BTreeSet<String>,
    /// Visible small files: companions and version files, by full path.
    pub files: BTreeMap<String, Vec<u8>>,
    pub whiteouts: Vec<String>,
    pub opaques: Vec<String>,
    pub compressed_bytes: u64,
}

/// Whiteouts of the layers above: what a lower layer can no longer show.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    hidden: HashSet<String>,
    opaque: HashSet<String>,
}

impl Overlay {
    /// True when an upper layer's whiteout or opaque directory hides this path.
    pub fn hides(&self, path: &str) -> bool {
        let mut prefix = path;
        loop {
            if self.hidden.contains(prefix) {
                return true;
            }
            match prefix.rfind('/') {
                Some(i) => {
                    prefix = &prefix[..i];
                    if self.opaque.contains(prefix) {
                        return true;
                    }
                }
                None => return self.opaque.contains(""),
            }
        }
    }

    /// Adds a scanned layer's whiteouts, which apply only to the layers below it.
    pub fn absorb(&mut self, layer: &LayerScan) {
        self.hidden.extend(layer.whiteouts.iter().cloned());
        self.opaque.extend(layer.opaques.iter().cloned());
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
    fn target_dir_and_stem(&self) -> (&str, &str) {
        let (dir, name) = split_parent(&self.target);
        (dir, name.strip_suffix(".py").unwrap_or(name))
    }

    fn is_pyc(&self, path: &str) -> bool {
        let (dir, name) = split_parent(path);
        let (cache_parent, cache) = split_parent(dir);
        let (tdir, stem) = self.target_dir_and_stem();
        cache == "__pycache__"
            && has_suffix(cache_parent, tdir)
            && name.starts_with(&format!("{stem}."))
            && name.ends_with(".pyc")
    }

    fn is_kept_file(&self, path: &str) -> bool {
        if self.companions.iter().any(|c| has_suffix(path, c)) {
            return true;
        }
        let (dir, name) = split_parent(path);
        let (_, dirname) = split_parent(dir);
        (name == "METADATA"
            && dirname.starts_with(&format!("{}-", self.package))
            && dirname.ends_with(".dist-info"))
            || (name == "_version.py" && dirname == self.package)
    }
}

/// Errors of a layer scan; each names the layer.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("layer {digest}: {source}")]
    Read { digest: String, source: io::Error },
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

/// Scans one layer read from `raw` (its compressed bytes), independently of the layers above,
/// so the result can be shared by every image holding the layer; [`LayerScan::visible`] then
/// applies an overlay. `raw` must verify the digest as it is read (as
/// `Registry::blob_reader` does): the layer is read to its end so that check always runs.
pub fn scan_layer<R: Read>(
    raw: R,
    desc: &Descriptor,
    compression: Compression,
    wanted: &Wanted,
) -> Result<LayerScan, ScanError> {
    let err = |source: io::Error| ScanError::Read {
        digest: desc.digest.clone(),
        source,
    };
    let mut counting = Counting {
        inner: raw,
        count: 0,
    };
    let mut scan = LayerScan::default();
    match compression {
        Compression::Gzip => {
            let mut gz = MultiGzDecoder::new(&mut counting);
            scan_tar(&mut gz, wanted, &mut scan).map_err(err)?;
            // The tar ends before the gzip stream does; read the rest so the CRC is checked.
            io::copy(&mut gz, &mut io::sink()).map_err(err)?;
        }
        Compression::None => scan_tar(&mut counting, wanted, &mut scan).map_err(err)?,
    }
    io::copy(&mut counting, &mut io::sink()).map_err(err)?;
    if counting.count != desc.size {
        return Err(ScanError::Size {
            digest: desc.digest.clone(),
            expected: desc.size,
            actual: counting.count,
        });
    }
    scan.compressed_bytes = counting.count;
    Ok(scan)
}

impl LayerScan {
    /// What of this layer is visible below the whiteouts of the layers above it.
    pub fn visible(&self, overlay: &Overlay) -> LayerScan {
        LayerScan {
            targets: self
                .targets
                .iter()
                .filter(|t| !overlay.hides(&t.path))
                .cloned()
                .collect(),
            pycs: self
                .pycs
                .iter()
                .filter(|p| !overlay.hides(p))
                .cloned()
                .collect(),
            files: self
                .files
                .iter()
                .filter(|(p, _)| !overlay.hides(p))
                .map(|(p, c)| (p.clone(), c.clone()))
                .collect(),
            whiteouts: self.whiteouts.clone(),
            opaques: self.opaques.clone(),
            compressed_bytes: self.compressed_bytes,
        }
    }
}

fn scan_tar<R: Read>(reader: R, wanted: &Wanted, scan: &mut LayerScan) -> io::Result<()> {
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let raw_path = entry.path()?.to_string_lossy().into_owned();
        let path = normalize(&raw_path);
        let (parent, name) = split_parent(&path);
        if let Some(hidden) = name.strip_prefix(".wh.") {
            if hidden == ".wh..opq" {
                scan.opaques.push(parent.to_owned());
            } else if parent.is_empty() {
                scan.whiteouts.push(hidden.to_owned());
            } else {
                scan.whiteouts.push(format!("{parent}/{hidden}"));
            }
            continue;
        }
        let etype = entry.header().entry_type();
        if has_suffix(&path, &wanted.target) {
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
                content: Vec::new(),
            };
            if found.kind == EntryKind::Regular {
                found.content = read_capped(&mut entry, &path)?;
            }
            scan.targets.push(found);
        } else if wanted.is_pyc(&path) && etype != tar::EntryType::Directory {
            scan.pycs.insert(path);
        } else if etype.is_file() && wanted.is_kept_file(&path) && !scan.files.contains_key(&path) {
            let content = read_capped(&mut entry, &path)?;
            scan.files.insert(path, content);
        }
    }
    Ok(())
}

fn link_name<R: Read>(entry: &tar::Entry<R>) -> String {
    entry
        .link_name()
        .ok()
        .flatten()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn read_capped<R: Read>(entry: &mut tar::Entry<R>, path: &str) -> io::Result<Vec<u8>> {
    let size = entry.header().size()?;
    if size > MAX_KEPT_FILE {
        return Err(io::Error::other(format!(
            "{path} is {size} bytes, larger than the {MAX_KEPT_FILE} bytes expected"
        )));
    }
    let mut buf = Vec::with_capacity(size as usize);
    entry.read_to_end(&mut buf)?;
    Ok(buf)
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

    #[test]
    fn overlay_hides_whited_out_and_opaque_paths() {
        let mut o = Overlay::default();
        let layer = LayerScan {
            whiteouts: vec!["opt/legacy".into()],
            opaques: vec!["usr/lib/pkg".into()],
            ..Default::default()
        };
        o.absorb(&layer);
        assert!(o.hides("opt/legacy"));
        assert!(o.hides("opt/legacy/vllm/x.py"));
        assert!(!o.hides("opt/legacy2/x.py"));
        assert!(o.hides("usr/lib/pkg/a.py"));
        assert!(!o.hides("usr/lib/pkg"));
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
