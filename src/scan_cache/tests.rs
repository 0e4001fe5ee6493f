use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::scan::{EntryKind, FileEntry};

fn desc() -> Descriptor {
    Descriptor::from_json(
        &json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": format!("sha256:{}", "ab".repeat(32)), "size": 1234}),
        "test",
    )
    .expect("descriptor")
}

fn wanted(target: &str) -> Wanted {
    Wanted {
        targets: vec![target.into()],
        companions: vec!["b.py".into(), "a.py".into()],
        packages: vec!["vllm".into()],
        ..Wanted::default()
    }
}

fn scan() -> LayerScan {
    let mut s = LayerScan::default();
    s.digest = desc().digest;
    s.targets = vec![FileEntry {
        path: "usr/lib/vllm/x.py".into(),
        kind: EntryKind::Regular,
        mode: 0o644,
        uid: 0,
        gid: 0,
        uname: Some("root".into()),
        gname: None,
        mtime: 1_700_000_000,
        content: Arc::new(b"assert x\n\xff".to_vec()),
    }];
    s.pycs = ["usr/lib/vllm/__pycache__/x.cpython-312.pyc".to_owned()].into();
    s.files = [(
        "usr/lib/vllm-0.27.1.dist-info/METADATA".to_owned(),
        Arc::new(b"Version: 0.27.1\n".to_vec()),
    )]
    .into();
    s.whiteouts = ["opt/legacy".to_owned()].into();
    s.opaques = ["usr/lib/somepkg".to_owned()].into();
    s.set_index_keys(vec![8, 16, !7]);
    s.links = [(16, "../lib".to_owned())].into();
    s.dirs = vec![24, 32];
    s.pythons = [11, 12].into();
    s.refusal = Some("why".into());
    s.kept = 42;
    s.compressed_bytes = 1234;
    s
}

#[test]
fn an_entry_round_trips_and_only_for_its_layer_and_patch() {
    let (d, w) = (desc(), wanted("vllm/x.py"));
    let key = wanted_key(&w);
    let bytes = encode(&d, Compression::Gzip, &key, &scan());
    let back = decode(&bytes, &d, Compression::Gzip, &key).expect("valid entry");
    assert_eq!(format!("{:?}", back), format!("{:?}", scan()));
    // Companion order does not change the key; another target does.
    let mut reordered = w.clone();
    reordered.companions.reverse();
    assert_eq!(wanted_key(&reordered), key);
    let other = wanted_key(&wanted("vllm/y.py"));
    assert!(decode(&bytes, &d, Compression::Gzip, &other).is_err());
    let mut d2 = d.clone();
    d2.digest = format!("sha256:{}", "cd".repeat(32));
    assert!(decode(&bytes, &d2, Compression::Gzip, &key).is_err());
    assert!(decode(&bytes, &d, Compression::None, &key).is_err());
    assert_ne!(
        entry_path(Path::new("/c"), &d, Compression::Gzip, &key),
        entry_path(Path::new("/c"), &d2, Compression::Gzip, &key)
    );
}

#[test]
fn an_edited_or_truncated_entry_is_refused() {
    let (d, w) = (desc(), wanted("vllm/x.py"));
    let key = wanted_key(&w);
    let bytes = encode(&d, Compression::Gzip, &key, &scan());
    let text = String::from_utf8(bytes.clone()).expect("utf8");
    // Change one byte of the kept content (base64 of "assert x").
    let edited = text.replacen("YXNzZXJ0", "YXNzZXJ1", 1);
    assert_ne!(edited, text);
    let err = decode(edited.as_bytes(), &d, Compression::Gzip, &key).expect_err("edited");
    assert!(err.contains("checksum"), "{err}");
    assert!(decode(&bytes[..bytes.len() / 2], &d, Compression::Gzip, &key).is_err());
    assert!(decode(b"", &d, Compression::Gzip, &key).is_err());
}

#[test]
fn a_scan_of_any_size_a_layer_may_keep_is_cached() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = ScanCache::at(false, Some(dir.path().to_path_buf()));
    let d = desc();
    let w = Wanted {
        dists: true,
        ..wanted("vllm/x.py")
    };
    let mut big = scan();
    // A torch-sized RECORD, and more: well past what entries were once limited to.
    big.files.insert(
        "usr/lib/torch-2.9.0.dist-info/RECORD".into(),
        Arc::new(vec![b'r'; 6 * 1024 * 1024]),
    );
    big.kept = 6 * 1024 * 1024 + 42;
    cache.store(&d, Compression::Gzip, &w, &big);
    let back = cache.load(&d, Compression::Gzip, &w).expect("cached");
    assert_eq!(format!("{back:?}"), format!("{big:?}"));
    // Another layer (a changed layer under the same tag) is not served from it.
    let mut d2 = d.clone();
    d2.digest = format!("sha256:{}", "cd".repeat(32));
    assert!(cache.load(&d2, Compression::Gzip, &w).is_none());
    // Megabytes kept by a scan that is not for distributions (a crafted layer's copies of a
    // target) are read again.
    let plain = wanted("vllm/x.py");
    cache.store(&d, Compression::Gzip, &plain, &big);
    assert!(cache.load(&d, Compression::Gzip, &plain).is_none());
}

#[test]
fn the_folder_stays_within_its_bound_least_recently_used_first() {
    let dir = tempfile::tempdir().expect("tmp");
    let v = dir.path().join(format!("v{FORMAT}"));
    std::fs::create_dir_all(&v).expect("mkdir");
    std::fs::create_dir_all(dir.path().join("v1")).expect("old format");
    let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(1000);
    let paths: Vec<PathBuf> = (0..6)
        .map(|i| {
            let p = v.join(format!("{i}.json"));
            std::fs::write(&p, vec![b'x'; 1000]).expect("write");
            let f = std::fs::File::options()
                .append(true)
                .open(&p)
                .expect("open");
            f.set_modified(t0 + std::time::Duration::from_secs(i * 10))
                .expect("mtime");
            p
        })
        .collect();
    // Entry 0 was read last: it is the most recently used.
    touch(&paths[0]);
    evict(dir.path(), &paths[5], 4000);
    let left: Vec<bool> = paths.iter().map(|p| p.exists()).collect();
    assert_eq!(left, [true, false, false, false, true, true], "{left:?}");
    assert!(
        !dir.path().join("v1").exists(),
        "an old format's folder stays"
    );
}
