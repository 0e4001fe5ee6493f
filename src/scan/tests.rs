use std::sync::Arc;

use super::*;
use crate::media::{Compression, Descriptor};

const T: &str = "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py";
const SITE: &str = "usr/local/lib/python3.12/dist-packages";

fn wanted() -> Wanted {
    Wanted {
        targets: vec![T.into()],
        companions: vec!["vllm_ascend/x.py".into()],
        packages: vec!["vllm".into()],
        ..Wanted::default()
    }
}

/// One tar entry: a path written raw into the header (so `..` and friends can be had),
/// its type, its data, and a link name.
struct E<'a>(&'a [u8], tar::EntryType, Vec<u8>, &'a str);

fn file(path: &str, data: &[u8]) -> E<'static> {
    E(
        Box::leak(path.as_bytes().to_vec().into_boxed_slice()),
        tar::EntryType::Regular,
        data.to_vec(),
        "",
    )
}

fn tar_of(entries: &[E<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for E(path, kind, data, link) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(data.len() as u64);
        if !link.is_empty() {
            h.set_link_name(link).expect("link");
        }
        if path.len() < 100 {
            h.as_gnu_mut().expect("gnu").name[..path.len()].copy_from_slice(path);
            h.set_cksum();
            b.append(&h, &data[..]).expect("append");
        } else {
            // A GNU long name entry, written by the tar crate.
            let p = std::str::from_utf8(path).expect("utf-8");
            b.append_data(&mut h, p, &data[..]).expect("append");
        }
    }
    b.into_inner().expect("tar")
}

fn scan_with(tar: &[u8], digest: &str, run: &Budget) -> LayerScan {
    let desc = Descriptor {
        media_type: crate::media::OCI_LAYER_TAR.into(),
        digest: digest.into(),
        size: tar.len() as u64,
        urls: Vec::new(),
    };
    scan_layer(tar, &desc, Compression::None, &wanted(), run).expect("scan")
}

fn scan(entries: &[E<'_>], digest: &str) -> Arc<LayerScan> {
    Arc::new(scan_with(
        &tar_of(entries),
        digest,
        &Budget::new(MAX_KEPT_PER_RUN),
    ))
}

fn dir(path: &str) -> E<'static> {
    E(
        Box::leak(path.as_bytes().to_vec().into_boxed_slice()),
        tar::EntryType::Directory,
        Vec::new(),
        "",
    )
}

fn symlink(path: &str, to: &'static str) -> E<'static> {
    E(
        Box::leak(path.as_bytes().to_vec().into_boxed_slice()),
        tar::EntryType::Symlink,
        Vec::new(),
        to,
    )
}

#[test]
fn zstd_layers_with_skippable_frames_are_read_to_the_end() {
    let tar = tar_of(&[file(&format!("usr/lib/{T}"), b"x = 1\n")]);
    // Two frames and a skippable frame at the end, as zstd:chunked writes its table of contents.
    let (a, b) = tar.split_at(tar.len() / 2);
    let mut blob = zstd::stream::encode_all(a, 3).expect("zstd");
    blob.extend(zstd::stream::encode_all(b, 3).expect("zstd"));
    blob.extend(0x184D_2A50u32.to_le_bytes());
    blob.extend(4u32.to_le_bytes());
    blob.extend(b"toc!");
    let desc = Descriptor {
        media_type: crate::media::OCI_LAYER_ZSTD.into(),
        digest: "sha256:z".into(),
        size: blob.len() as u64,
        urls: Vec::new(),
    };
    let run = Budget::new(MAX_KEPT_PER_RUN);
    let s = scan_layer(&blob[..], &desc, Compression::Zstd, &wanted(), &run).expect("scan");
    assert_eq!(s.targets.len(), 1);
    assert_eq!(s.compressed_bytes, blob.len() as u64);
    // A truncated frame is an error, not a short layer.
    let cut = &blob[..blob.len() / 2];
    let short = Descriptor {
        size: cut.len() as u64,
        ..desc
    };
    assert!(scan_layer(cut, &short, Compression::Zstd, &wanted(), &run).is_err());
}

#[test]
fn overlay_hides_whited_out_and_opaque_paths() {
    let mut o = Overlay::default();
    o.absorb(scan(
        &[
            file("opt/.wh.legacy", b""),
            file("usr/lib/pkg/.wh..wh..opq", b""),
        ],
        "sha256:up",
    ));
    assert!(o.hides("opt/legacy"));
    assert!(o.hides("opt/legacy/vllm/x.py"));
    assert!(!o.hides("opt/legacy2/x.py"));
    assert!(o.hides("usr/lib/pkg/a.py"));
    assert!(!o.hides("usr/lib/pkg"));
    let h = o.hider("usr/lib/pkg/a/b.py").expect("hidden");
    assert_eq!((h.at.as_str(), &h.by), ("usr/lib/pkg", &HiddenBy::Opaque));
}

#[test]
fn non_directory_ancestors_hide_the_tree_below() {
    let mut o = Overlay::default();
    o.absorb(scan(
        &[
            symlink(&format!("{SITE}/vllm"), "/opt/vllm"),
            file("etc/profile.d", b"a file where a directory was\n"),
            dir("usr/share/doc"),
        ],
        "sha256:up",
    ));
    let h = o
        .hider(&format!("{SITE}/{T}"))
        .expect("hidden by the symlink");
    assert_eq!(h.at, format!("{SITE}/vllm"));
    assert_eq!(h.by, HiddenBy::NonDir(NodeKind::Symlink));
    assert!(
        h.to_string().contains(
            "a symbolic link at /usr/local/lib/python3.12/dist-packages/vllm in layer sha256:up"
        ),
        "{h}"
    );
    assert_eq!(
        o.hider("etc/profile.d/x.sh").map(|h| h.by),
        Some(HiddenBy::NonDir(NodeKind::File))
    );
    // The entry itself and its siblings are not hidden; a directory hides nothing.
    assert!(!o.hides(&format!("{SITE}/vllm")));
    assert!(!o.hides(&format!("{SITE}/vllm2/x.py")));
    assert!(!o.hides("usr/share/doc/x"));
}

#[test]
fn hard_links_devices_and_fifos_at_an_ancestor_hide_too() {
    for (kind, node) in [
        (tar::EntryType::Link, NodeKind::Hardlink),
        (tar::EntryType::Char, NodeKind::Device),
        (tar::EntryType::Block, NodeKind::Device),
        (tar::EntryType::Fifo, NodeKind::Fifo),
    ] {
        let link = if kind == tar::EntryType::Link {
            "etc/hostname"
        } else {
            ""
        };
        let mut o = Overlay::default();
        o.absorb(scan(
            &[E(b"usr/local/lib", kind, Vec::new(), link)],
            "sha256:up",
        ));
        assert_eq!(
            o.hider(&format!("{SITE}/{T}")).map(|h| (h.at, h.by)),
            Some(("usr/local/lib".to_owned(), HiddenBy::NonDir(node))),
            "{kind:?}"
        );
    }
}

#[test]
fn descent_refuses_a_target_shadowed_by_an_upper_symlink_or_file() {
    for (upper, what) in [
        (
            symlink(&format!("{SITE}/vllm"), "/opt/vllm"),
            "a symbolic link",
        ),
        (
            file(&format!("{SITE}/vllm/distributed"), b"x"),
            "a regular file",
        ),
    ] {
        let mut d = Descent::default();
        assert!(!d.push(2, scan(&[upper], "sha256:upper"), 1));
        let stop = d.push(
            1,
            scan(&[file(&format!("{SITE}/{T}"), b"code")], "sha256:lower"),
            1,
        );
        assert!(stop);
        let why = d.refusal.expect("refused");
        assert!(
            why.contains(&format!(
                "/{SITE}/{T} (layer sha256:lower) is shadowed by {what}"
            )),
            "{why}"
        );
        assert!(d.hits.is_empty());
    }
}

#[test]
fn descent_names_the_whiteout_that_hides_the_only_copy() {
    let mut d = Descent::default();
    d.push(
        2,
        scan(&[file(&format!("{SITE}/.wh.vllm"), b"")], "sha256:upper"),
        1,
    );
    d.push(
        1,
        scan(&[file(&format!("{SITE}/{T}"), b"code")], "sha256:lower"),
        1,
    );
    d.push(0, scan(&[file("etc/os-release", b"x")], "sha256:base"), 1);
    assert!(d.refusal.is_none() && d.hits.is_empty());
    let msg = d.nothing_visible(T);
    assert!(msg.starts_with("no layer holds a visible"), "{msg}");
    assert!(
        msg.contains(&format!(
            "is hidden by a whiteout of /{SITE}/vllm in layer sha256:upper"
        )),
        "{msg}"
    );
}

#[test]
fn descent_skips_a_whited_out_decoy_and_finds_the_copy_below() {
    let mut d = Descent::default();
    d.push(3, scan(&[file("opt/.wh.legacy", b"")], "sha256:a"), 1);
    d.push(
        2,
        scan(&[file(&format!("opt/legacy/{T}"), b"old")], "sha256:b"),
        1,
    );
    let stop = d.push(
        1,
        scan(&[file(&format!("{SITE}/{T}"), b"new")], "sha256:c"),
        1,
    );
    assert!(stop && d.refusal.is_none());
    assert_eq!(d.hits[0].0, 1);
    assert_eq!(d.hits[0].1[0].path, format!("{SITE}/{T}"));
}

#[test]
fn unsafe_paths_are_refusals_naming_layer_and_path() {
    for raw in [
        &b"../etc/passwd"[..],
        b"/../../vllm/x.py",
        b"usr/../../x",
        b"usr/lib/.wh..",
    ] {
        let s = scan(
            &[
                file("etc/ok", b"x"),
                E(raw, tar::EntryType::Regular, vec![], ""),
            ],
            "sha256:bad",
        );
        let why = s.refusal.as_deref().expect("refused");
        assert!(why.starts_with("layer sha256:bad: the tar path"), "{why}");
        assert!(
            why.contains(&format!("{:?}", String::from_utf8_lossy(raw))),
            "{why}"
        );
        assert_eq!(s.kept, 0);
    }
    assert_eq!(unsafe_path(b"a/b\0c"), Some("holds a NUL byte"));
    assert_eq!(unsafe_path(b"./usr/lib/x..y/.wh.a"), None);
    assert_eq!(unsafe_path(b"/usr/lib/x"), None);
}

#[test]
fn a_symlink_above_the_target_in_its_own_layer_is_refused() {
    let s = scan(
        &[
            symlink(&format!("{SITE}/vllm/distributed"), "elsewhere"),
            file(&format!("{SITE}/{T}"), b"code"),
        ],
        "sha256:same",
    );
    let why = s.refusal.as_deref().expect("refused");
    assert!(why.contains("is a symbolic link and"), "{why}");
}

#[test]
fn kept_bytes_are_capped_per_layer_and_the_refusal_keeps_nothing() {
    let big = vec![b'x'; 6 * 1024 * 1024];
    let entries: Vec<E<'_>> = (0..8)
        .map(|i| file(&format!("{SITE}/vllm-0.{i}.dist-info/METADATA"), &big))
        .collect();
    let run = Budget::new(MAX_KEPT_PER_RUN);
    let s = scan_with(&tar_of(&entries), "sha256:bomb", &run);
    let why = s.refusal.as_deref().expect("refused");
    assert!(
        why.starts_with(
            "layer sha256:bomb: the scan would keep more than the 24.0 MiB kept per layer"
        ),
        "{why}"
    );
    assert!(why.contains("4 version or guard file(s)"), "{why}");
    assert!(s.files.is_empty() && s.kept == 0);
    assert_eq!(run.used(), 0, "a refused scan gives its bytes back");

    let one = scan_with(
        &tar_of(&[
            file("a/vllm/x.py", b""),
            file(&format!("{SITE}/{T}"), &vec![b'y'; 17 * 1024 * 1024]),
        ]),
        "sha256:huge",
        &run,
    );
    assert!(one
        .refusal
        .as_deref()
        .expect("refused")
        .contains("more than the 16.0 MiB kept per file"));
}

#[test]
fn kept_bytes_are_capped_per_run() {
    let run = Budget::new(MAX_KEPT_PER_RUN);
    let big = vec![b'x'; 10 * 1024 * 1024];
    let mut refused = None;
    for n in 0..4 {
        let entries: Vec<E<'_>> = (0..2)
            .map(|i| file(&format!("{SITE}/vllm-{n}.{i}.dist-info/METADATA"), &big))
            .collect();
        let s = scan_with(&tar_of(&entries), &format!("sha256:l{n}"), &run);
        if s.refusal.is_some() {
            refused = Some((n, s.refusal.clone().unwrap_or_default()));
            break;
        }
        assert_eq!(s.files.len(), 2);
    }
    let (n, why) = refused.expect("the third layer passes the run's cap");
    assert_eq!(n, 2);
    assert!(why.contains("kept per run"), "{why}");
    assert!(run.used() <= MAX_KEPT_PER_RUN);
}

#[test]
fn an_endless_tar_header_extension_is_refused() {
    let mut h = tar::Header::new_ustar();
    h.set_path("PaxHeader").expect("path");
    h.set_entry_type(tar::EntryType::XHeader);
    let record = vec![b'a'; 3 * 1024 * 1024];
    h.set_size(record.len() as u64);
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, &record[..]).expect("append");
    let mut f = tar::Header::new_ustar();
    f.set_path("etc/x").expect("path");
    f.set_size(0);
    f.set_cksum();
    b.append(&f, &[][..]).expect("append");
    let s = scan_with(
        &b.into_inner().expect("tar"),
        "sha256:pax",
        &Budget::new(MAX_KEPT_PER_RUN),
    );
    assert!(
        s.refusal
            .as_deref()
            .expect("refused")
            .contains("tar header extension"),
        "{:?}",
        s.refusal
    );
}

#[test]
fn the_same_path_twice_keeps_the_later_entry() {
    let s = scan(
        &[
            file(&format!("{SITE}/{T}"), b"first"),
            file(&format!("{SITE}/{T}"), b"second"),
        ],
        "sha256:twice",
    );
    assert_eq!(s.targets.len(), 1);
    assert_eq!(s.targets[0].content.as_slice(), b"second");
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

/// A walk for exact `paths` over layers given top first (each a list of entries).
fn walk(paths: &[&str], layers: &[Vec<E<'_>>]) -> Descent {
    let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
    let want = Wanted {
        paths: paths.clone(),
        ..Wanted::default()
    };
    let run = Budget::new(MAX_KEPT_PER_RUN);
    let mut d = Descent::new(&[], &[]).with_paths(&paths);
    let n = layers.len();
    for (i, entries) in layers.iter().enumerate() {
        let tar = tar_of(entries);
        let desc = Descriptor {
            media_type: crate::media::OCI_LAYER_TAR.into(),
            digest: format!("sha256:l{}", n - 1 - i),
            size: tar.len() as u64,
            urls: Vec::new(),
        };
        let s = scan_layer(&tar[..], &desc, Compression::None, &want, &run).expect("scan");
        assert!(
            !d.push(n - 1 - i, Arc::new(s), 1),
            "a walk for paths never stops early"
        );
    }
    assert!(d.complete);
    d
}

const ASCEND: &str = "usr/local/Ascend/mindie";
const DAEMON: &str = "mindie-service/bin/mindieservice_daemon";

fn mindie(link: &'static str) -> Vec<Vec<E<'static>>> {
    vec![
        vec![symlink(&format!("{ASCEND}/latest"), link)],
        vec![
            dir(ASCEND),
            dir(&format!("{ASCEND}/8.3.RC1")),
            file(&format!("{ASCEND}/8.3.RC1/{DAEMON}"), b"#!/bin/sh\n"),
        ],
    ]
}

#[test]
fn links_at_ancestors_are_followed_inside_the_image() {
    let spelled = format!("{ASCEND}/latest/{DAEMON}");
    let real = format!("{ASCEND}/8.3.RC1/{DAEMON}");
    for link in [
        "8.3.RC1",
        "/usr/local/Ascend/mindie/8.3.RC1",
        "./../mindie/8.3.RC1/",
    ] {
        let d = walk(&[&spelled], &mindie(link));
        let r = d.resolve(&spelled).expect("resolves");
        assert_eq!(r.path, real, "{link}");
        assert_eq!(r.node, Node::Entry(NodeKind::File));
        assert_eq!(r.via, [(format!("{ASCEND}/latest"), link.to_owned())]);
        // The file lies in the lower layer, which no scan kept: read it again from there.
        assert_eq!(d.to_read_again(), [(0, real.clone())]);
    }
    // A chain of two: latest -> current -> 8.3.RC1.
    let mut layers = mindie("current");
    layers[0].push(symlink(&format!("{ASCEND}/current"), "8.3.RC1"));
    let d = walk(&[&spelled], &layers);
    let r = d.resolve(&spelled).expect("chain");
    assert_eq!((r.path.as_str(), r.via.len()), (real.as_str(), 2));
    // A file to be created there resolves the same way (nothing is at its path yet).
    let new = format!("{ASCEND}/latest/mindie-service/bin/new.sh");
    let r = d.resolve(&new).expect("new");
    assert_eq!(
        r.path,
        format!("{ASCEND}/8.3.RC1/mindie-service/bin/new.sh")
    );
    assert_eq!(r.node, Node::Absent);
}

#[test]
fn links_leaving_the_root_or_looping_are_refused() {
    let spelled = format!("{ASCEND}/latest/{DAEMON}");
    let d = walk(&[&spelled], &mindie("../../../../../opt/x"));
    let e = d
        .resolve(&spelled)
        .expect_err("leaves the root")
        .to_string();
    assert_eq!(
        e,
        format!("the symbolic link /{ASCEND}/latest -> ../../../../../opt/x leads out of the image root")
    );
    let mut layers = mindie("other");
    layers[0].push(symlink(&format!("{ASCEND}/other"), "latest"));
    let d = walk(&[&spelled], &layers);
    let e = d.resolve(&spelled).expect_err("loop").to_string();
    assert!(e.contains("loops"), "{e}");
    assert!(
        d.to_read_again().is_empty(),
        "nothing to read for a refused path"
    );
    // A file where a directory is needed.
    let d = walk(
        &["etc/hosts/x"],
        &[vec![file("etc/hosts", b"127.0.0.1 localhost\n")]],
    );
    let e = d.resolve("etc/hosts/x").expect_err("not a dir").to_string();
    assert_eq!(
        e,
        "/etc/hosts is a regular file where a directory is needed"
    );
}

#[test]
fn an_upper_directory_replaces_a_lower_link_and_whiteouts_hide_it() {
    let spelled = format!("{ASCEND}/latest/{DAEMON}");
    // An upper layer made `latest` a real directory holding its own daemon.
    let mut layers = mindie("8.3.RC1");
    layers.insert(
        0,
        vec![
            dir(&format!("{ASCEND}/latest")),
            file(&spelled, b"#!/bin/sh\necho upper\n"),
        ],
    );
    let d = walk(&[&spelled], &layers);
    let r = d.resolve(&spelled).expect("dir");
    assert_eq!((r.path.as_str(), r.via.len()), (spelled.as_str(), 0));
    assert!(d.to_read_again().is_empty());
    assert_eq!(
        d.hits.len(),
        1,
        "the kept copy in the upper layer is what is seen"
    );
    // The same upper file without a directory entry: runtimes disagree, so it is refused.
    let mut layers = mindie("8.3.RC1");
    layers.insert(0, vec![file(&spelled, b"#!/bin/sh\necho upper\n")]);
    let d = walk(&[&spelled], &layers);
    let e = d
        .resolve(&spelled)
        .expect_err("written through")
        .to_string();
    assert!(
        e.contains("lies below /usr/local/Ascend/mindie/latest, a symbolic link in a lower layer"),
        "{e}"
    );
    // A whiteout of the link above it: the path is not there any more.
    let mut layers = mindie("8.3.RC1");
    layers.insert(0, vec![file(&format!("{ASCEND}/.wh.latest"), b"")]);
    let d = walk(&[&spelled], &layers);
    let r = d.resolve(&spelled).expect("resolves");
    assert_eq!(
        (r.path.as_str(), &r.node),
        (spelled.as_str(), &Node::Absent)
    );
}

#[test]
fn a_walk_for_exact_paths_keeps_what_resolution_needs() {
    let run = Budget::new(MAX_KEPT_PER_RUN);
    let tar = tar_of(&[
        dir("usr/lib/python3.11"),
        symlink("usr/bin/python3", "python3.11"),
        file("usr/bin/python3.11", b"\x7fELF"),
        file("opt/app/conf.json", b"{}"),
    ]);
    let desc = Descriptor {
        media_type: crate::media::OCI_LAYER_TAR.into(),
        digest: "sha256:a".into(),
        size: tar.len() as u64,
        urls: Vec::new(),
    };
    let exact = Wanted {
        paths: vec!["opt/app/conf.json".into()],
        ..Wanted::default()
    };
    let s = scan_layer(&tar[..], &desc, Compression::None, &exact, &run).expect("scan");
    assert_eq!(s.targets.len(), 1, "the exact path is kept");
    assert_eq!(s.link("usr/bin/python3"), Some("python3.11"));
    assert!(s.is_dir("usr/lib/python3.11"));
    assert_eq!(s.pythons.iter().copied().collect::<Vec<_>>(), [11]);
    // A scan by suffix only keeps no links or directories (nothing to resolve).
    let s = scan_layer(&tar[..], &desc, Compression::None, &wanted(), &run).expect("scan");
    assert!(s.links.is_empty() && s.dirs.is_empty());
    assert_eq!(
        s.pythons.len(),
        1,
        "the interpreter probe runs on every scan"
    );
}

#[test]
fn a_walk_stops_once_the_python_of_a_module_is_known() {
    let target = vec!["probe/mod.py".to_owned()];
    let want = Wanted {
        targets: target.clone(),
        ..Wanted::default()
    };
    let run = Budget::new(MAX_KEPT_PER_RUN);
    let layer = |entries: &[E<'_>], n: usize| {
        let tar = tar_of(entries);
        let desc = Descriptor {
            media_type: crate::media::OCI_LAYER_TAR.into(),
            digest: format!("sha256:{n}"),
            size: tar.len() as u64,
            urls: Vec::new(),
        };
        Arc::new(scan_layer(&tar[..], &desc, Compression::None, &want, &run).expect("scan"))
    };
    // The module's path names no version: the walk goes on to the layer that shows Python.
    let mut d = Descent::new(&target, &target);
    assert!(!d.push(3, layer(&[file("opt/app/probe/mod.py", b"X = 1\n")], 3), 1));
    assert!(!d.push(2, layer(&[file("etc/hostname", b"x\n")], 2), 1));
    assert!(d.push(1, layer(&[file("usr/bin/python3.11", b"\x7fELF")], 1), 1));
    assert_eq!(
        (
            d.layers_scanned,
            d.pythons.iter().copied().collect::<Vec<_>>()
        ),
        (3, vec![11])
    );
    // A path that names its version stops at the module's layer, as before.
    let site = "usr/lib/python3.12/site-packages/probe/mod.py";
    let mut d = Descent::new(&target, &target);
    assert!(d.push(3, layer(&[file(site, b"X = 1\n")], 3), 1));
    assert_eq!(d.layers_scanned, 1);
}

fn layer_desc(tar: &[u8], n: usize) -> Descriptor {
    Descriptor {
        media_type: crate::media::OCI_LAYER_TAR.into(),
        digest: format!("sha256:{n}"),
        size: tar.len() as u64,
        urls: Vec::new(),
    }
}

const DI: &str = "usr/lib/python3.11/site-packages/a-1.0.dist-info";

#[test]
fn a_scan_for_distributions_keeps_dist_info_metadata_only() {
    let run = Budget::new(MAX_KEPT_PER_RUN);
    let tar = tar_of(&[
        file(&format!("{DI}/METADATA"), b"Name: a\nVersion: 1.0\n"),
        file(&format!("{DI}/RECORD"), b"a/__init__.py,,\n"),
        file(&format!("{DI}/top_level.txt"), b"a\n"),
        file(&format!("{DI}/licenses/RECORD"), b"not metadata"),
        file("usr/lib/python3.11/site-packages/a/__init__.py", b""),
        file(
            "usr/lib/python3.11/site-packages/.dist-info/METADATA",
            b"no name",
        ),
    ]);
    let desc = layer_desc(&tar, 1);
    let dists = Wanted {
        dists: true,
        ..Wanted::default()
    };
    let s = scan_layer(&tar[..], &desc, Compression::None, &dists, &run).expect("scan");
    let kept: Vec<&str> = s.files.keys().map(String::as_str).collect();
    assert_eq!(kept, [format!("{DI}/METADATA"), format!("{DI}/RECORD")]);
    assert_eq!(
        s.files[&format!("{DI}/RECORD")].as_slice(),
        b"a/__init__.py,,\n"
    );
    assert!(run.dist_used() > 0 && run.used() < run.dist_used());
    // Without asking, nothing of it is kept.
    let s = scan_layer(&tar[..], &desc, Compression::None, &Wanted::default(), &run).expect("scan");
    assert!(s.files.is_empty());
}

#[test]
fn distribution_metadata_has_its_own_bounded_budget() {
    let tar = tar_of(&[
        file(&format!("{DI}/METADATA"), &[b'x'; 600]),
        file(&format!("{DI}/RECORD"), &[b'y'; 600]),
    ]);
    let desc = layer_desc(&tar, 1);
    let dists = Wanted {
        dists: true,
        ..Wanted::default()
    };
    let run = Budget::with_dists(MAX_KEPT_PER_RUN, 1000);
    let s = scan_layer(&tar[..], &desc, Compression::None, &dists, &run).expect("scan");
    let why = s.refusal.expect("refused");
    assert!(
        why.contains("*.dist-info") && why.contains("sha256:1"),
        "{why}"
    );
    assert!(!why.contains('\n'), "{why}");
    assert_eq!((run.dist_used(), run.used(), s.files.len()), (0, 0, 0));
    // A single file over the per-file cap is refused by name before it is read.
    let big = vec![b'z'; MAX_DIST_FILE as usize + 1];
    let tar = tar_of(&[file(&format!("{DI}/RECORD"), &big)]);
    let run = Budget::new(MAX_KEPT_PER_RUN);
    let s = scan_layer(
        &tar[..],
        &layer_desc(&tar, 2),
        Compression::None,
        &dists,
        &run,
    )
    .expect("scan");
    let why = s.refusal.expect("refused");
    assert!(why.contains(&format!("/{DI}/RECORD")), "{why}");
    assert_eq!(run.dist_used(), 0);
}

#[test]
fn a_walk_for_distributions_reads_every_layer_with_overlay_rules() {
    let target = vec!["probe/mod.py".to_owned()];
    let want = Wanted {
        targets: target.clone(),
        dists: true,
        ..Wanted::default()
    };
    let run = Budget::new(MAX_KEPT_PER_RUN);
    let layer = |entries: &[E<'_>], n: usize| {
        let tar = tar_of(entries);
        let desc = layer_desc(&tar, n);
        Arc::new(scan_layer(&tar[..], &desc, Compression::None, &want, &run).expect("scan"))
    };
    let site = "usr/lib/python3.11/site-packages";
    let mut d = Descent::new(&target, &target).with_dists(true);
    // The top layer whites out a-1.0's dist-info and installs a-2.0; the target is found
    // there, and the walk still goes to the bottom.
    assert!(!d.push(
        2,
        layer(
            &[
                file(&format!("{site}/.wh.a-1.0.dist-info"), b""),
                file(
                    &format!("{site}/a-2.0.dist-info/METADATA"),
                    b"Version: 2.0\n"
                ),
                file(&format!("{site}/probe/mod.py"), b"X = 1\n"),
                file(&format!("{site}/c-1.0.dist-info/.wh..wh..opq"), b""),
            ],
            2
        ),
        1
    ));
    assert!(!d.push(
        1,
        layer(
            &[
                file(&format!("{DI}/METADATA"), b"Version: 1.0\n"),
                file(
                    &format!("{site}/b-1.0.dist-info/METADATA"),
                    b"Version: 1.0\n"
                ),
                file(&format!("{site}/c-1.0.dist-info/RECORD"), b"hidden\n"),
            ],
            1
        ),
        1
    ));
    assert!(!d.push(0, layer(&[file("etc/hostname", b"x\n")], 0), 1));
    assert!(d.complete);
    let kept: Vec<&str> = d.files.keys().map(String::as_str).collect();
    assert_eq!(
        kept,
        [
            format!("{site}/a-2.0.dist-info/METADATA"),
            format!("{site}/b-1.0.dist-info/METADATA")
        ]
    );
    // The layer holding the visible copy of a file, for a second read that hashes it.
    assert_eq!(
        d.holder(&format!("{site}/b-1.0.dist-info/METADATA")),
        Some(1)
    );
    assert_eq!(d.holder(&format!("{site}/probe/mod.py")), Some(2));
    assert!(matches!(d.node(&format!("{DI}/METADATA")), Node::Absent));
}

#[test]
fn a_second_read_hashes_the_files_asked_for_as_they_stream() {
    let tar = tar_of(&[
        file("opt/a.bin", b"first"),
        file("opt/b.bin", b"bee"),
        file("opt/a.bin", b"second"),
        symlink("opt/c.bin", "a.bin"),
        file("opt/d.bin", b"not asked"),
    ]);
    let desc = layer_desc(&tar, 1);
    let paths: std::collections::BTreeSet<String> =
        ["opt/a.bin", "opt/b.bin", "opt/c.bin", "opt/e.bin"]
            .iter()
            .map(|p| p.to_string())
            .collect();
    let found = hash_layer(&tar[..], &desc, Compression::None, &paths).expect("read");
    let want: std::collections::BTreeMap<String, String> = [
        ("opt/a.bin".to_owned(), crate::digest::sha256(b"second")),
        ("opt/b.bin".to_owned(), crate::digest::sha256(b"bee")),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        found, want,
        "the last entry wins; a link or an absent path has none"
    );
    // A layer shorter than its descriptor says is an error, not a short answer.
    let short = Descriptor {
        size: desc.size + 1,
        ..desc
    };
    assert!(hash_layer(&tar[..], &short, Compression::None, &paths).is_err());
}
