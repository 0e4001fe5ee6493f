use std::io::Read;

use super::build::build_into;
use super::*;
use crate::patch::Change;
use crate::patch::Streamed;
use crate::scan::{EntryKind, FileEntry};

fn streamed(bytes: &'static [u8], size: u64, sha256: String) -> Change {
    let mut e = entry();
    e.path = "opt/big.bin".into();
    e.content = Vec::new().into();
    Change::Stream(Box::new(Streamed {
        entry: e,
        size,
        sha256,
        open: std::sync::Arc::new(move || Ok(Box::new(bytes) as Box<dyn Read + Send>)),
    }))
}

#[test]
fn streamed_file_is_written_and_checked() {
    let good = crate::digest::sha256(b"payload");
    let hex = good.trim_start_matches("sha256:").to_owned();
    let l = build_changes(&[streamed(b"payload", 7, hex.clone())], 9, "m").expect("builds");
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(l.blob.reader()));
    let mut found = Vec::new();
    for e in ar.entries().expect("tar") {
        let mut e = e.expect("entry");
        let mut body = Vec::new();
        e.read_to_end(&mut body).expect("read");
        found.push((e.path().expect("path").display().to_string(), body));
    }
    assert_eq!(found, vec![("opt/big.bin".to_owned(), b"payload".to_vec())]);
    // A source that gives other bytes, fewer or more than declared is refused.
    for (bytes, size) in [
        (&b"paylold"[..], 7),
        (&b"pay"[..], 7),
        (&b"payload!"[..], 7),
    ] {
        let e = build_changes(&[streamed(bytes, size, hex.clone())], 9, "m")
            .expect_err("refused")
            .to_string();
        assert!(e.contains("/opt/big.bin changed"), "{e}");
    }
}

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
    assert_eq!(
        a.digest,
        crate::digest::sha256(a.blob.in_memory().expect("small layers stay in memory"))
    );
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(a.blob.reader()));
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

fn write(path: &str) -> Change {
    Change::Write(FileEntry {
        path: path.into(),
        ..entry()
    })
}

fn hide(path: &str) -> Change {
    Change::Whiteout(path.into())
}

#[test]
fn contradicting_changes_are_refused_before_building() {
    let refused = |changes: Vec<Change>, expect: &str| {
        let e = build_changes(&changes, 0, crate::media::OCI_LAYER_GZIP)
            .expect_err("refused")
            .to_string();
        assert!(e.contains(expect), "{e} should say {expect:?}");
    };
    refused(
        vec![write("opt/a"), hide("opt/a")],
        "both write and hide /opt/a",
    );
    refused(
        vec![hide("opt/a"), write("opt/a")],
        "both write and hide /opt/a",
    );
    refused(vec![write("opt/a"), write("opt/a")], "write /opt/a twice");
    refused(
        vec![hide("opt/d"), write("opt/d/x/f")],
        "write /opt/d/x/f below /opt/d, which it hides",
    );
    refused(
        vec![hide("opt/d"), hide("opt/d/__pycache__/m.pyc")],
        "hide /opt/d/__pycache__/m.pyc below /opt/d",
    );
    refused(
        vec![write("opt/f"), hide("opt/f/x")],
        "write /opt/f as a file and put /opt/f/x below it",
    );
    refused(vec![write("/etc/x")], "not a normalized path");
    refused(vec![write("etc/../x")], "not a normalized path");
    refused(vec![hide("etc/.wh.x")], "not a normalized path");
    // Siblings, the same whiteout twice, and a whiteout beside a written sibling are fine.
    let ok = vec![
        write("opt/d/m.py"),
        hide("opt/d/__pycache__/m.cpython-312.pyc"),
        hide("opt/d/__pycache__/m.cpython-312.pyc"),
        hide("opt/other"),
    ];
    let layer = build_changes(&ok, 0, crate::media::OCI_LAYER_GZIP).expect("builds");
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(layer.blob.reader()));
    let names: Vec<String> = ar
        .entries()
        .expect("entries")
        .map(|e| {
            e.expect("entry")
                .path()
                .expect("path")
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        [
            "opt/.wh.other",
            "opt/d/__pycache__/.wh.m.cpython-312.pyc",
            "opt/d/m.py"
        ]
    );
}

/// Bytes like a shared library's: runs of fresh pseudo-random bytes between repeated ones.
fn binary(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(3) {
            out.extend_from_slice(&x.to_le_bytes());
        } else {
            out.extend_from_slice(b"\x48\x89\xe5\x41\x57\x41\x56");
        }
    }
    out.truncate(len);
    out
}

/// A streamed file at `path` whose opener gives `bytes` (checked against their own sha256).
fn stream_of(path: &str, bytes: std::sync::Arc<Vec<u8>>) -> Change {
    let hex = crate::digest::sha256(&bytes)
        .trim_start_matches("sha256:")
        .to_owned();
    let mut e = entry();
    e.path = path.into();
    e.content = Vec::new().into();
    let size = bytes.len() as u64;
    Change::Stream(Box::new(Streamed {
        entry: e,
        size,
        sha256: hex,
        open: std::sync::Arc::new(move || {
            Ok(Box::new(std::io::Cursor::new(bytes.to_vec())) as Box<dyn Read + Send>)
        }),
    }))
}

fn mixed_changes() -> Vec<Change> {
    let big = std::sync::Arc::new(binary(3 << 20, 7));
    vec![
        stream_of("usr/lib/python3/dist-packages/pkg/_core.so", big),
        Change::Write(FileEntry {
            path: "usr/lib/python3/dist-packages/pkg/__init__.py".into(),
            content: b"from ._core import *\n".to_vec().into(),
            ..entry()
        }),
        hide("usr/lib/python3/dist-packages/pkg-1.0.dist-info"),
    ]
}

fn all_bytes(l: &NewLayer) -> Vec<u8> {
    let mut out = Vec::new();
    l.blob
        .reader()
        .read_to_end(&mut out)
        .expect("read the blob");
    out
}

/// Open descriptors of this process on files in `dir` (an unnamed file shows as
/// `DIR/#123 (deleted)`).
fn open_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

#[test]
fn spooled_layer_has_the_bytes_of_the_memory_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let changes = mixed_changes();
    let m = build_into(&changes, 5, "m", dir.path().into(), usize::MAX).expect("in memory");
    let f = build_into(&changes, 5, "m", dir.path().into(), 0).expect("spooled");
    assert!(!m.blob.is_spooled() && f.blob.is_spooled());
    assert_eq!(
        (&m.digest, &m.diff_id, m.size()),
        (&f.digest, &f.diff_id, f.size())
    );
    let bytes = all_bytes(&f);
    assert_eq!(&bytes[..], &m.blob.in_memory().expect("memory")[..]);
    assert_eq!(crate::digest::sha256(&bytes), f.digest);
    assert_eq!(bytes.len() as u64, f.size());
    // The uncompressed tar hashes to the diff_id, GNU tar-style entries in order.
    let mut tar_bytes = Vec::new();
    flate2::read::GzDecoder::new(f.blob.reader())
        .read_to_end(&mut tar_bytes)
        .expect("gunzip");
    assert_eq!(crate::digest::sha256(&tar_bytes), f.diff_id);
    // Past the limit a layer of written files moves to a file; under it, it stays.
    let small = build_into(&changes[1..], 5, "m", dir.path().into(), 1 << 20).expect("small");
    assert!(!small.blob.is_spooled());
    let moved = build_into(&changes[1..], 5, "m", dir.path().into(), 100).expect("moved");
    assert!(moved.blob.is_spooled());
    assert_eq!(moved.digest, small.digest);
    assert_eq!(
        all_bytes(&moved),
        &small.blob.in_memory().expect("memory")[..]
    );
    // The layer of `build_changes` spools a streamed file and gives the same bytes.
    let public = build_changes(&changes, 5, "m").expect("builds");
    assert!(public.blob.is_spooled());
    assert_eq!(public.digest, m.digest);
}

#[test]
fn readers_of_one_spooled_layer_do_not_share_a_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = build_into(&mixed_changes(), 5, "m", dir.path().into(), 0).expect("spooled");
    let (mut a, mut b) = (l.blob.reader(), l.clone().blob.reader());
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    let mut buf = [0u8; 4096];
    loop {
        let na = a.read(&mut buf).expect("a");
        got_a.extend_from_slice(&buf[..na]);
        let nb = b.read(&mut buf[..1000]).expect("b");
        got_b.extend_from_slice(&buf[..nb]);
        if na == 0 && nb == 0 {
            break;
        }
    }
    assert_eq!(got_a, got_b);
    assert_eq!(crate::digest::sha256(&got_a), l.digest);
}

#[test]
fn spooled_file_has_no_name_and_goes_with_the_last_clone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = build_into(&mixed_changes(), 5, "m", dir.path().into(), 0).expect("spooled");
    let names = || std::fs::read_dir(dir.path()).expect("dir").count();
    assert_eq!(names(), 0, "the temporary file never has a name");
    assert_eq!(open_in(dir.path()), 1, "one open file holds the layer");
    let copy = l.clone();
    drop(l);
    assert_eq!(open_in(dir.path()), 1);
    drop(copy);
    assert_eq!(
        open_in(dir.path()),
        0,
        "the file is gone with the last clone"
    );
}

#[test]
fn spooled_layer_refuses_a_changed_source_and_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut changes = mixed_changes();
    if let Change::Stream(s) = &mut changes[0] {
        let other = binary(3 << 20, 8);
        s.open = std::sync::Arc::new(move || {
            Ok(Box::new(std::io::Cursor::new(other.clone())) as Box<dyn Read + Send>)
        });
    }
    let e = build_into(&changes, 5, "m", dir.path().into(), 0)
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("the bytes of /usr/lib/python3/dist-packages/pkg/_core.so changed"),
        "{e}"
    );
    assert_eq!(open_in(dir.path()), 0);
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

#[test]
fn a_temporary_directory_that_cannot_be_written_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("not-there");
    let e = build_into(&mixed_changes(), 5, "m", missing.clone(), 0)
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains(&missing.display().to_string()) && e.contains("TMPDIR"),
        "{e}"
    );
}

#[test]
fn identical_changes_are_built_once_while_a_plan_holds_the_layer() {
    let shared = Shared::default();
    let changes = mixed_changes();
    let a = shared.layer(&changes, 5, "m").expect("a");
    let b = shared.layer(&changes, 5, "m").expect("b");
    assert_eq!(shared.builds(), 1);
    assert_eq!(a.digest, b.digest);
    // One build, the same bytes for both.
    assert_eq!(all_bytes(&a), all_bytes(&b));
    // Another mtime is another layer; another media type names the same bytes.
    let c = shared.layer(&changes, 6, "m").expect("c");
    let d = shared.layer(&changes, 5, "n").expect("d");
    assert_eq!(shared.builds(), 2);
    assert_ne!(c.digest, a.digest);
    assert_eq!(
        (d.digest.as_str(), d.media_type.as_str()),
        (a.digest.as_str(), "n")
    );
    // Once no plan holds it, the layer is built again (its file was deleted).
    let first = a.digest.clone();
    drop((a, b));
    drop(d);
    let e = shared.layer(&changes, 5, "m").expect("e");
    assert_eq!(shared.builds(), 3);
    assert_eq!(e.digest, first);
}
