//! A new layer from a patch's changes: each written file at its path with the header it was
//! given (the original's owner and mode), and a `.wh.` entry for each hidden path. Made
//! reproducible: sorted entries, fixed headers, a gzip header without time or name, one pinned
//! deflate backend. Built in memory when small; a layer with streamed files (a wheel's) or past
//! a few MiB is spooled to a temporary file as it is compressed ([`LayerBlob`]), both digests
//! hashed on the way, so its size never sits in memory; where it goes does not change a byte.
//!
//! A layer is refused before it is built when its changes contradict each other: a path
//! written and hidden, written twice, or written below a path hidden or written as a file in
//! the same layer. containerd's overlayfs snapshotter refuses to unpack a whiteout beside a file
//! of the same name (`failed to convert whiteout file ...: file exists`) and its native
//! snapshotter deletes the file, while umoci keeps it; no reading is safe, so none is written.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use sha2::Digest;

use flate2::{Compression, GzBuilder};

use super::blob::{LayerBlob, Spool, MEMORY_MAX};
use crate::digest::HashingWriter;
use crate::patch::verdict::Change;

/// A finished layer blob with both of its digests.
#[derive(Debug, Clone)]
pub struct NewLayer {
    /// The compressed bytes, in memory or in a temporary file.
    pub blob: LayerBlob,
    /// sha256 of the compressed bytes (the blob digest).
    pub digest: String,
    /// sha256 of the uncompressed tar (the config's `rootfs.diff_ids` entry).
    pub diff_id: String,
    pub media_type: String,
    pub mtime: u64,
}

impl NewLayer {
    /// The blob's size in bytes (the descriptor's `size`).
    pub fn size(&self) -> u64 {
        self.blob.size()
    }
}

/// Why a layer was not built.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// The changes contradict each other (see the module's doc).
    #[error("the layer would {0}; refusing to write a layer that runtimes unpack differently")]
    Conflict(String),
    /// A path that is not a clean path below the root.
    #[error("the layer would hold the path {0:?}, which is not a normalized path below the root")]
    BadPath(String),
    #[error("building the layer: {0}")]
    Io(#[from] std::io::Error),
}

/// Whether a path is relative, normalized and free of `.`, `..`, NUL and whiteout names.
fn clean(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\0')
        && path
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != ".." && !p.starts_with(".wh."))
}

/// Checks that no path is written and hidden, written twice, or written below a path this
/// layer hides or writes as a file; returns the first contradiction.
pub fn check_changes(changes: &[Change]) -> Result<(), LayerError> {
    // path -> written (true) or hidden (false)
    let mut seen: BTreeMap<&str, bool> = BTreeMap::new();
    for c in changes {
        let (path, writes) = match c {
            Change::Write(e) => (e.path.as_str(), true),
            Change::Stream(s) => (s.entry.path.as_str(), true),
            Change::Whiteout(p) => (p.as_str(), false),
        };
        if !clean(path) {
            return Err(LayerError::BadPath(path.to_owned()));
        }
        match (seen.insert(path, writes), writes) {
            (Some(true), true) => return Err(LayerError::Conflict(format!("write /{path} twice"))),
            (Some(false), false) | (None, _) => {}
            (Some(_), _) => {
                return Err(LayerError::Conflict(format!("both write and hide /{path}")))
            }
        }
    }
    for (path, writes) in &seen {
        let mut up = *path;
        while let Some((parent, _)) = up.rsplit_once('/') {
            match seen.get(parent) {
                Some(false) => {
                    let what = if *writes { "write" } else { "hide" };
                    return Err(LayerError::Conflict(format!(
                        "{what} /{path} below /{parent}, which it hides"
                    )));
                }
                Some(true) => {
                    return Err(LayerError::Conflict(format!(
                        "write /{parent} as a file and put /{path} below it"
                    )))
                }
                None => {}
            }
            up = parent;
        }
    }
    Ok(())
}

/// A streamed file's reader that counts and hashes what it gives, so a source that changed
/// since it was checked (a wheel replaced in the cache) cannot slip into a layer.
struct Checked<'a> {
    path: &'a str,
    size: u64,
    sha256: &'a str,
    read: u64,
    hasher: sha2::Sha256,
    inner: Box<dyn Read + Send>,
}

impl<'a> Checked<'a> {
    fn new(path: &'a str, size: u64, sha256: &'a str, inner: Box<dyn Read + Send>) -> Self {
        Checked {
            path,
            size,
            sha256,
            read: 0,
            hasher: sha2::Sha256::new(),
            inner,
        }
    }

    /// Refuses the bytes read unless they are the size and sha256 the change named.
    fn finish(self) -> std::io::Result<()> {
        let got = crate::digest::finish(self.hasher);
        if self.read != self.size || got.strip_prefix("sha256:") != Some(self.sha256) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "the bytes of /{} changed: {} bytes with {got}, expected {} bytes with sha256:{}",
                    self.path, self.read, self.size, self.sha256
                ),
            ));
        }
        Ok(())
    }
}

impl Read for Checked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Never past the declared size: tar pads to it and a longer source must not shift entries.
        let left = self.size.saturating_sub(self.read);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = if want == 0 {
            // One byte more tells a source longer than declared.
            let mut probe = [0u8; 1];
            let extra = self.inner.read(&mut probe)?;
            self.read += extra as u64;
            return Ok(0);
        } else {
            self.inner.read(&mut buf[..want])?
        };
        self.hasher.update(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

/// Appends one entry: a written file with its own header (bytes in memory, or streamed and
/// checked), or a whiteout stamped `whiteout_mtime`. Returns the entry's mtime.
fn append_entry<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    change: Option<&Change>,
    whiteout_mtime: u64,
) -> Result<u64, LayerError> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    let e = match change {
        Some(Change::Write(e)) => e,
        Some(Change::Stream(s)) => &s.entry,
        Some(Change::Whiteout(_)) | None => {
            h.set_mtime(whiteout_mtime);
            h.set_mode(0o644);
            h.set_uid(0);
            h.set_gid(0);
            h.set_size(0);
            tar.append_data(&mut h, path, std::io::empty())?;
            return Ok(whiteout_mtime);
        }
    };
    h.set_mtime(e.mtime);
    h.set_mode(e.mode);
    h.set_uid(e.uid);
    h.set_gid(e.gid);
    if let Some(u) = &e.uname {
        h.set_username(u)?;
    }
    if let Some(g) = &e.gname {
        h.set_groupname(g)?;
    }
    if let Some(Change::Stream(s)) = change {
        h.set_size(s.size);
        let mut checked = Checked::new(path, s.size, &s.sha256, (s.open)()?);
        tar.append_data(&mut h, path, &mut checked)?;
        checked.finish()?;
    } else {
        h.set_size(e.content.len() as u64);
        tar.append_data(&mut h, path, &e.content[..])?;
    }
    Ok(e.mtime)
}

/// Builds the layer of one patch's changes: each written file with its own header (kept from
/// the file it replaces), each hidden path as a `.wh.<name>` entry stamped `whiteout_mtime`.
/// Entries are sorted by path, so whiteouts in `__pycache__/` come before the module itself
/// and the same changes always give the same bytes. Contradicting changes are refused
/// ([`check_changes`]). A layer with a streamed file is spooled to a temporary file in the
/// run's temporary directory from its first byte; others move there past [`MEMORY_MAX`].
pub fn build_changes(
    changes: &[Change],
    whiteout_mtime: u64,
    media_type: &str,
) -> Result<NewLayer, LayerError> {
    let streams = changes.iter().any(|c| matches!(c, Change::Stream(_)));
    let limit = if streams { 0 } else { MEMORY_MAX };
    build_into(
        changes,
        whiteout_mtime,
        media_type,
        std::env::temp_dir(),
        limit,
    )
}

/// [`build_changes`] with the compressed bytes kept in memory up to `limit` bytes, then in an
/// unnamed temporary file in `dir`.
pub(crate) fn build_into(
    changes: &[Change],
    whiteout_mtime: u64,
    media_type: &str,
    dir: std::path::PathBuf,
    limit: usize,
) -> Result<NewLayer, LayerError> {
    check_changes(changes)?;
    let compressed = HashingWriter::new(Spool::new(dir, limit)?);
    let gz = GzBuilder::new()
        .mtime(0)
        .write(compressed, Compression::new(6));
    let uncompressed = HashingWriter::new(gz);
    let mut tar = tar::Builder::new(uncompressed);
    tar.mode(tar::HeaderMode::Complete);

    let mut latest = whiteout_mtime;
    for (path, change) in sorted_entries(changes) {
        latest = latest.max(append_entry(&mut tar, &path, change, whiteout_mtime)?);
    }
    let uncompressed = tar.into_inner()?;
    let (gz, diff_id, _) = uncompressed.finish();
    let compressed = gz.finish()?;
    let (mut spool, digest, size) = compressed.finish();
    spool.flush()?;
    Ok(NewLayer {
        blob: spool.finish(size)?,
        digest,
        diff_id,
        media_type: media_type.to_owned(),
        mtime: latest,
    })
}

/// Each change's tar entry name (a whiteout's `.wh.` name), sorted, each once.
fn sorted_entries(changes: &[Change]) -> Vec<(String, Option<&Change>)> {
    let mut entries: Vec<(String, Option<&Change>)> = changes
        .iter()
        .map(|c| match c {
            Change::Write(e) => (e.path.clone(), Some(c)),
            Change::Stream(s) => (s.entry.path.clone(), Some(c)),
            Change::Whiteout(w) => {
                let (dir, name) = w.rsplit_once('/').unwrap_or(("", w.as_str()));
                let path = if dir.is_empty() {
                    format!(".wh.{name}")
                } else {
                    format!("{dir}/.wh.{name}")
                };
                (path, None)
            }
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.dedup_by(|a, b| a.0 == b.0);
    entries
}
