//! Files written so that a reader, or a machine that lost power, sees the old file or the whole
//! new one, never a part: the digest map and the scan cache (an OCI layout writes its blobs the
//! same way, asynchronously, in the registry's layout store).

use std::io::Write;
use std::path::{Path, PathBuf};

/// The folder holding `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// `.<name of path><suffix>` in the same folder: a temporary file or a lock beside `path`.
pub fn beside(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    parent_dir(path).join(format!(".{name}{suffix}"))
}

/// The temporary file this process writes `path` through.
pub fn tmp_path(path: &Path) -> PathBuf {
    beside(path, &format!(".{}.tmp", std::process::id()))
}

/// Writes `bytes` to `path` atomically and durably: a temporary file beside it, flushed and
/// fsynced, renamed over it, and the folder fsynced so the rename itself is on disk. A failed
/// write leaves the old file and no temporary one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// As [`write_atomic`], with the content written by `write` through a buffer: a big file is
/// never held in memory whole.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = tmp_path(path);
    let result = (|| {
        let mut b = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        write(&mut b)?;
        let f = b
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(parent_dir(path))?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_files_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("map.json");
        write_atomic(&path, b"one").expect("write");
        write_atomic(&path, b"two").expect("rewrite");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["map.json"]);
        let missing = dir.path().join("no/such/folder/map.json");
        assert!(write_atomic(&missing, b"x").is_err());
    }
}
