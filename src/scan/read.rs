//! Reading one layer: decompress, walk the tar, keep the wanted entries within the budgets.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;
use std::sync::Arc;

use flate2::bufread::MultiGzDecoder;

use super::keep::{keep_dist, mib, read_kept, Counts, Keeper, Stop};
use super::overlay::{ancestors, index_key, LayerScan, NodeKind};
use super::types::*;
use crate::media::{Compression, Descriptor};

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
pub(super) struct Counting<R> {
    inner: R,
    count: u64,
}

impl<R> Counting<R> {
    pub(super) fn new(inner: R) -> Self {
        Counting { inner, count: 0 }
    }

    pub(super) fn count(&self) -> u64 {
        self.count
    }
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
pub(super) struct ExtensionTooLong;

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
pub(super) struct Metered<R> {
    inner: R,
    allowance: Rc<Cell<u64>>,
}

impl<R> Metered<R> {
    /// A reader bounded by `allowance`, which the caller resets between entries.
    pub(super) fn new(inner: R, allowance: Rc<Cell<u64>>) -> Self {
        Metered { inner, allowance }
    }
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

/// The buffer on each side of a gzip layer's inflate.
const INFLATE_BUFFER: usize = 256 << 10;

/// The tar stream inside a layer's compressed bytes: gzip (every member), zstd (every frame;
/// skippable frames, as zstd:chunked writes them, are passed over), or none. `verify` and the
/// scan read layers through this one choice.
pub fn decompress<'a, R: Read + 'a>(
    raw: R,
    compression: Compression,
) -> io::Result<Box<dyn Read + 'a>> {
    Ok(match compression {
        // Buffers on both sides of the inflate: it then runs over large spans instead of the
        // tar reader's 512-byte headers and 8 KiB copies (the scan of the bench's 1.6 GB
        // layer took 12% less time).
        Compression::Gzip => Box::new(io::BufReader::with_capacity(
            INFLATE_BUFFER,
            MultiGzDecoder::new(io::BufReader::with_capacity(INFLATE_BUFFER, raw)),
        )),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(raw)?),
        Compression::None => Box::new(raw),
    })
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
        dist_kept: 0,
        counts: Counts::default(),
    };
    {
        let mut tar = decompress(&mut counting, compression).map_err(err)?;
        scan_tar(&mut tar, wanted, &mut scan, &mut keeper).map_err(err)?;
        // The tar ends before the compressed stream does: read the rest, so the gzip CRC or
        // every zstd frame's checksum is checked.
        io::copy(&mut tar, &mut io::sink()).map_err(err)?;
    }
    io::copy(&mut counting, &mut io::sink()).map_err(err)?;
    if counting.count != desc.size {
        keeper.give_back_all();
        return Err(ScanError::Size {
            digest: desc.digest.clone(),
            expected: desc.size,
            actual: counting.count,
        });
    }
    scan.compressed_bytes = counting.count;
    scan.kept = keeper.kept + keeper.dist_kept;
    Ok(scan)
}

/// Reads the tar; on a refusal, records it in `scan`, drops everything kept and returns `Ok`
/// (the caller then reads the rest of the stream, so its digest is still checked).
pub(super) fn scan_tar<R: Read>(
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
                keeper.give_back_all();
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
        keeper.give_back_all();
        // Whatever the tar reader left unread is read (and checked) by the caller.
        allowance.set(u64::MAX);
        let mut rest = archive.into_inner();
        io::copy(&mut rest, &mut io::sink())?;
        return Ok(());
    }
    finish(wanted, scan, keeper);
    Ok(())
}

/// The end of a layer's scan: a non-directory entry at an ancestor of a kept copy in the same
/// layer refuses it (the copy is left to the extraction order, refused like an upper one); the
/// index of a layer holding every target is dropped (a top-down scan stops there) unless the
/// scan resolves exact paths, which needs every index.
fn finish(wanted: &Wanted, scan: &mut LayerScan, keeper: &mut Keeper<'_>) {
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
        keeper.give_back_all();
        return;
    }
    scan.dirs.sort_unstable();
    scan.dirs.dedup();
    let holds_all = !wanted.resolves_links()
        && !wanted.dists
        && wanted
            .targets
            .iter()
            .all(|w| scan.targets.iter().any(|t| has_suffix(&t.path, w)));
    if holds_all {
        keeper.give_back(scan.non_dirs.len() as u64 * INDEX_ENTRY);
        scan.non_dirs = Vec::new();
    } else {
        scan.non_dirs.shrink_to_fit();
    }
}

/// Records a whiteout (`.wh.NAME`) or an opaque directory (`.wh..wh..opq`) of this layer.
fn whiteout(
    scan: &mut LayerScan,
    keeper: &mut Keeper<'_>,
    parent: &str,
    hidden: &str,
    digest: &str,
) -> Result<(), Stop> {
    let (set, at) = if hidden == ".wh..opq" {
        (&mut scan.opaques, parent.to_owned())
    } else if parent.is_empty() {
        (&mut scan.whiteouts, hidden.to_owned())
    } else {
        (&mut scan.whiteouts, format!("{parent}/{hidden}"))
    };
    keeper.counts.whiteouts += 1;
    keeper
        .take(at.len() as u64 + ITEM_OVERHEAD, digest)
        .map_err(Stop::Refused)?;
    set.insert(at);
    Ok(())
}

/// Keeps a wanted file's entry: its header fields, and its content when it is a regular file.
fn keep_target<R: Read>(
    entry: &mut tar::Entry<R>,
    path: String,
    etype: tar::EntryType,
    scan: &mut LayerScan,
    keeper: &mut Keeper<'_>,
    digest: &str,
) -> Result<(), Stop> {
    let header = entry.header();
    let kind = match etype {
        tar::EntryType::Regular | tar::EntryType::Continuous => EntryKind::Regular,
        tar::EntryType::Symlink => EntryKind::Symlink(link_name(entry)),
        tar::EntryType::Link => EntryKind::Hardlink(link_name(entry)),
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
        found.content = Arc::new(read_kept(entry, &path, digest, keeper, |c| c.targets += 1)?);
    } else {
        keeper.counts.targets += 1;
        keeper
            .take(path.len() as u64 + ITEM_OVERHEAD, digest)
            .map_err(Stop::Refused)?;
    }
    // The same path twice: the later entry is what extraction leaves.
    if let Some(i) = scan.targets.iter().position(|t| t.path == path) {
        let old = scan.targets.remove(i);
        keeper.give_back(old.content.len() as u64 + old.path.len() as u64 + ITEM_OVERHEAD);
    }
    scan.targets.push(found);
    Ok(())
}

pub(super) fn scan_entries<R: Read>(
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
            whiteout(scan, keeper, parent, hidden, &digest)?;
            io::copy(&mut entry, &mut io::sink())?;
            continue;
        }
        if let Some(minor) = interpreter_minor(&path) {
            scan.pythons.insert(minor);
        }
        if etype != tar::EntryType::Directory {
            keeper.counts.indexed += 1;
            keeper.take(INDEX_ENTRY, &digest).map_err(Stop::Refused)?;
            scan.non_dirs
                .push(index_key(&path) | NodeKind::of(etype).code());
        }
        if wanted.resolves_links() {
            let link = (etype == tar::EntryType::Symlink).then(|| link_name(&entry));
            let (take, freed) = scan.learn(&path, etype == tar::EntryType::Directory, link);
            keeper.counts.links += 1;
            keeper.give_back(freed);
            keeper.take(take, &digest).map_err(Stop::Refused)?;
        }
        if wanted.is_target(&path) {
            keep_target(&mut entry, path, etype, scan, keeper, &digest)?;
        } else if wanted.is_pyc(&path) && etype != tar::EntryType::Directory {
            if !scan.pycs.contains(&path) {
                keeper.counts.pycs += 1;
                keeper
                    .take(path.len() as u64 + ITEM_OVERHEAD, &digest)
                    .map_err(Stop::Refused)?;
                scan.pycs.insert(path);
            }
        } else if etype.is_file() && wanted.is_dist_file(&path) {
            keep_dist(&mut entry, path, scan, keeper, &digest)?;
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

pub(super) fn link_name<R: Read>(entry: &tar::Entry<R>) -> String {
    entry
        .link_name()
        .ok()
        .flatten()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}
