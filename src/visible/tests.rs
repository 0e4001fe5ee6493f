use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

use super::Visible;
use crate::media::{Compression, Descriptor};
use crate::patch::{Change, Streamed, Tree};
use crate::scan::{self, Budget, Descent, FileEntry, Wanted};

const SITE: &str = "usr/lib/python3.11/site-packages";

fn layer(files: &[(&str, &[u8])]) -> Arc<scan::LayerScan> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, &data[..]).expect("append");
    }
    let tar = b.into_inner().expect("tar");
    let desc = Descriptor {
        media_type: crate::media::OCI_LAYER_TAR.into(),
        digest: "sha256:l".into(),
        size: tar.len() as u64,
        urls: Vec::new(),
    };
    let want = Wanted {
        dists: true,
        ..Wanted::default()
    };
    let run = Budget::new(scan::MAX_KEPT_PER_RUN);
    Arc::new(scan::scan_layer(&tar[..], &desc, Compression::None, &want, &run).expect("scan"))
}

fn descent() -> Descent {
    let mut d = Descent::new(&[], &[]).with_dists(true);
    d.push(
        0,
        layer(&[
            (
                &format!("{SITE}/a-1.0.dist-info/METADATA"),
                b"Name: a\nVersion: 1.0\n",
            ),
            (&format!("{SITE}/a-1.0.dist-info/RECORD"), b"a/x.py,,\n"),
            (
                &format!("{SITE}/b-2.0.dist-info/METADATA"),
                b"Name: b\nVersion: 2.0\n",
            ),
            (&format!("{SITE}/a/x.py"), b"x = 1\n"),
        ]),
        1,
    );
    d
}

fn names(t: &dyn Tree) -> Vec<(String, Vec<String>)> {
    t.dists()
        .into_iter()
        .map(|d| (d.dir, d.files.keys().cloned().collect()))
        .collect()
}

#[test]
fn dists_show_the_image_and_the_patches_stacked_so_far() {
    let d = descent();
    let mut v = Visible::new(&d, serde_json::json!({}));
    assert_eq!(
        names(&v),
        [
            (
                format!("{SITE}/a-1.0.dist-info"),
                vec!["METADATA".into(), "RECORD".into()]
            ),
            (format!("{SITE}/b-2.0.dist-info"), vec!["METADATA".into()]),
        ]
    );
    // A patch removes a 1.0 (whole dist-info) and installs a 2.0, its METADATA streamed.
    let meta: &'static [u8] = b"Name: a\nVersion: 2.0\n";
    let path = format!("{SITE}/a-2.0.dist-info/METADATA");
    let streamed = Change::Stream(Box::new(Streamed {
        entry: FileEntry::created(path.clone(), Vec::new(), 0o644, 0),
        size: meta.len() as u64,
        sha256: crate::digest::sha256(meta)
            .trim_start_matches("sha256:")
            .into(),
        open: Arc::new(move || Ok(Box::new(meta) as Box<dyn Read + Send>)),
    }));
    v.apply(
        &[
            Change::Whiteout(format!("{SITE}/a-1.0.dist-info")),
            streamed,
            Change::Write(FileEntry::created(
                format!("{SITE}/a-2.0.dist-info/INSTALLER"),
                b"runner-patch\n".to_vec(),
                0o644,
                0,
            )),
        ],
        None,
    );
    let dists = v.dists();
    let dirs: Vec<&str> = dists.iter().map(|d| d.dir.as_str()).collect();
    assert_eq!(
        dirs,
        [
            format!("{SITE}/a-2.0.dist-info"),
            format!("{SITE}/b-2.0.dist-info")
        ]
    );
    assert_eq!(dists[0].files["METADATA"].as_slice(), meta);
    assert_eq!(dists[0].files["INSTALLER"].as_slice(), b"runner-patch\n");
}

#[test]
fn hashed_answers_from_the_second_read_and_the_patches_so_far() {
    let d = descent();
    let mut v = Visible::new(&d, serde_json::json!({}));
    let x = format!("{SITE}/a/x.py");
    v.set_hashes(BTreeMap::from([(
        x.clone(),
        crate::digest::sha256(b"x = 1\n"),
    )]));
    assert_eq!(v.hashed(&x), Some(crate::digest::sha256(b"x = 1\n")));
    assert_eq!(v.hashed(&format!("{SITE}/a/y.py")), None);
    // Rewritten by a patch: its new bytes; hidden (here by its directory): none.
    v.apply(
        &[Change::Write(FileEntry::created(
            x.clone(),
            b"x = 2\n".to_vec(),
            0o644,
            0,
        ))],
        None,
    );
    assert_eq!(v.hashed(&x), Some(crate::digest::sha256(b"x = 2\n")));
    let mut v = Visible::new(&d, serde_json::json!({}));
    v.set_hashes(BTreeMap::from([(
        x.clone(),
        crate::digest::sha256(b"x = 1\n"),
    )]));
    v.apply(&[Change::Whiteout(format!("{SITE}/a"))], None);
    assert_eq!(v.hashed(&x), None);
}

#[test]
fn a_tree_without_a_scan_for_distributions_shows_none() {
    let mut d = Descent::new(&[], &[]);
    d.push(
        0,
        layer(&[(&format!("{SITE}/a-1.0.dist-info/METADATA"), b"x")]),
        1,
    );
    assert!(Visible::new(&d, serde_json::json!({})).dists().is_empty());
}

#[test]
fn a_layer_read_no_longer_awaited_fails_at_its_next_read_and_a_finished_one_never_does() {
    use super::layers::Abandon;
    let data = vec![7u8; 64];
    let (guard, mut reader) = Abandon::guard(&data[..]);
    let mut buf = [0u8; 16];
    assert_eq!(reader.read(&mut buf).expect("read while awaited"), 16);
    drop(guard);
    let err = reader.read(&mut buf).expect_err("abandoned");
    assert!(err.to_string().contains("abandoned"), "{err}");

    let (guard, mut reader) = Abandon::guard(&data[..]);
    guard.disarm();
    let mut all = Vec::new();
    reader
        .read_to_end(&mut all)
        .expect("read after the scan ended");
    assert_eq!(all, data);
}
