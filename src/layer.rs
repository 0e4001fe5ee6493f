//! A new layer from a patch's changes: each written file at its path with the header it was
//! given (the original's owner and mode), and a `.wh.` entry for each hidden path. Built in memory (it is a few KiB) and made reproducible:
//! sorted entries, fixed headers, a gzip header without time or name, one pinned deflate backend.

use std::io::Write;

use flate2::{Compression, GzBuilder};

use crate::digest::HashingWriter;
use crate::patch::verdict::Change;
use crate::scan::FileEntry;

/// A finished layer blob with both of its digests.
#[derive(Debug, Clone)]
pub struct NewLayer {
    pub bytes: Vec<u8>,
    /// sha256 of the compressed bytes (the blob digest).
    pub digest: String,
    /// sha256 of the uncompressed tar (the config's `rootfs.diff_ids` entry).
    pub diff_id: String,
    pub media_type: String,
    pub mtime: u64,
}

/// Builds the layer of one patch's changes: each written file with its own header (kept from
/// the file it replaces), each hidden path as a `.wh.<name>` entry stamped `whiteout_mtime`.
/// Entries are sorted by path, so whiteouts in `__pycache__/` come before the module itself
/// and the same changes always give the same bytes.
pub fn build_changes(
    changes: &[Change],
    whiteout_mtime: u64,
    media_type: &str,
) -> std::io::Result<NewLayer> {
    let compressed = HashingWriter::new(Vec::new());
    let gz = GzBuilder::new()
        .mtime(0)
        .write(compressed, Compression::new(6));
    let uncompressed = HashingWriter::new(gz);
    let mut tar = tar::Builder::new(uncompressed);
    tar.mode(tar::HeaderMode::Complete);

    let mut entries: Vec<(String, Option<&FileEntry>)> = changes
        .iter()
        .map(|c| match c {
            Change::Write(e) => (e.path.clone(), Some(e)),
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
    let mut latest = whiteout_mtime;

    for (path, file) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        match file {
            Some(e) => {
                h.set_mtime(e.mtime);
                latest = latest.max(e.mtime);
                h.set_mode(e.mode);
                h.set_uid(e.uid);
                h.set_gid(e.gid);
                if let Some(u) = &e.uname {
                    h.set_username(u)?;
                }
                if let Some(g) = &e.gname {
                    h.set_groupname(g)?;
                }
                h.set_size(e.content.len() as u64);
                tar.append_data(&mut h, &path, &e.content[..])?;
            }
            None => {
                h.set_mtime(whiteout_mtime);
                h.set_mode(0o644);
                h.set_uid(0);
                h.set_gid(0);
                h.set_size(0);
                tar.append_data(&mut h, &path, std::io::empty())?;
            }
        }
    }
    let uncompressed = tar.into_inner()?;
    let (gz, diff_id, _) = uncompressed.finish();
    let compressed = gz.finish()?;
    let (mut out, digest, _) = compressed.finish();
    out.flush()?;
    Ok(NewLayer {
        bytes: out,
        digest,
        diff_id,
        media_type: media_type.to_owned(),
        mtime: latest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::EntryKind;

    fn entry() -> FileEntry {
        FileEntry {
            path: "usr/local/lib/python3.12/dist-packages/vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py".into(),
            kind: EntryKind::Regular,
            mode: 0o644,
            uid: 1000,
            gid: 1001,
            uname: Some("app".into()),
            gname: Some("grp".into()),
            mtime: 1_700_000_000,
            content: b"old".to_vec().into(),
        }
    }

    #[test]
    fn layer_is_reproducible_and_readable() {
        let wh = ["usr/local/lib/python3.12/dist-packages/vllm/distributed/kv_transfer/kv_connector/v1/__pycache__/multi_connector.cpython-312.pyc".to_owned()];
        let mut changes: Vec<Change> = wh.iter().cloned().map(Change::Whiteout).collect();
        changes.push(Change::Write(FileEntry {
            content: b"new\n".to_vec().into(),
            mtime: 1_800_000_000,
            ..entry()
        }));
        let build =
            || build_changes(&changes, 1_800_000_000, crate::media::OCI_LAYER_GZIP).expect("build");
        let (a, b) = (build(), build());
        assert_eq!(a.digest, b.digest);
        assert_eq!(a.digest, crate::digest::sha256(&a.bytes));
        let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(&a.bytes[..]));
        let names: Vec<(String, u64, u64, u32)> = ar
            .entries()
            .expect("entries")
            .map(|e| {
                let e = e.expect("entry");
                let h = e.header();
                (
                    e.path().expect("path").to_string_lossy().into_owned(),
                    h.uid().expect("uid"),
                    h.mtime().expect("mtime"),
                    h.mode().expect("mode"),
                )
            })
            .collect();
        assert_eq!(names.len(), 2);
        assert!(names[0]
            .0
            .ends_with("__pycache__/.wh.multi_connector.cpython-312.pyc"));
        assert_eq!(names[1].0, entry().path);
        assert_eq!(
            (names[1].1, names[1].2, names[1].3),
            (1000, 1_800_000_000, 0o644)
        );
    }
}
