//! The second read of a layer for a patch that must know the bytes of files it does not keep
//! (`PatchKind::hashes`): each wanted regular file is hashed as it streams by, never held, and
//! the layer is read to its end so that its digest and size are checked.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read};
use std::rc::Rc;

use sha2::Digest;

use super::read::{decompress, Counting, Metered, ScanError};
use super::types::{normalize, MAX_TAR_EXTENSION};
use crate::media::{Compression, Descriptor};

/// The sha256 (`sha256:<hex>`) of each regular file of `paths` (normalized, relative to `/`)
/// the layer holds, the last entry of a path winning as extraction does; a path whose last
/// entry is not a regular file has none. `raw` must verify the digest as it is read.
pub fn hash_layer<R: Read>(
    raw: R,
    desc: &Descriptor,
    compression: Compression,
    paths: &BTreeSet<String>,
) -> Result<BTreeMap<String, String>, ScanError> {
    let err = |error: io::Error| ScanError::Read {
        digest: desc.digest.clone(),
        error,
    };
    let mut counting = Counting::new(raw);
    let mut found = BTreeMap::new();
    {
        let mut tar = decompress(&mut counting, compression).map_err(err)?;
        hash_entries(&mut tar, paths, &mut found).map_err(err)?;
        io::copy(&mut tar, &mut io::sink()).map_err(err)?;
    }
    io::copy(&mut counting, &mut io::sink()).map_err(err)?;
    if counting.count() != desc.size {
        return Err(ScanError::Size {
            digest: desc.digest.clone(),
            expected: desc.size,
            actual: counting.count(),
        });
    }
    Ok(found
        .into_iter()
        .filter_map(|(p, h)| Some((p, h?)))
        .collect())
}

fn hash_entries<R: Read>(
    reader: R,
    paths: &BTreeSet<String>,
    found: &mut BTreeMap<String, Option<String>>,
) -> io::Result<()> {
    let allowance = Rc::new(Cell::new(MAX_TAR_EXTENSION));
    let mut archive = tar::Archive::new(Metered::new(reader, allowance.clone()));
    let mut entries = archive.entries()?;
    loop {
        allowance.set(MAX_TAR_EXTENSION);
        let Some(entry) = entries.next() else {
            return Ok(());
        };
        let mut entry = entry?;
        allowance.set(u64::MAX);
        let path = normalize(&String::from_utf8_lossy(&entry.path_bytes()));
        if paths.contains(&path) {
            let etype = entry.header().entry_type();
            let regular = matches!(etype, tar::EntryType::Regular | tar::EntryType::Continuous);
            let hash = if regular {
                let mut hasher = sha2::Sha256::new();
                io::copy(&mut entry, &mut HashSink(&mut hasher))?;
                Some(crate::digest::finish(hasher))
            } else {
                None
            };
            found.insert(path, hash);
        }
        io::copy(&mut entry, &mut io::sink())?;
    }
}

/// Feeds what is written to a hasher.
struct HashSink<'a>(&'a mut sha2::Sha256);

impl io::Write for HashSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
