//! Wheels built here with the zip crate, installed over an in-memory tree: the files and
//! whiteouts pip's install and uninstall amount to, and every refusal of a bad wheel.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use sha2::Digest;

use super::install::{self, install};
use super::record;
use super::target::{Scheme, Target};
use super::uninstall::{self, Context};
use super::wheel::{self, Wheel};
use crate::patch::dist::Dist;
use crate::patch::error::Error;
use crate::patch::tree::{Below, Tree};
use crate::patch::verdict::Change;
use crate::scan::{EntryKind, FileEntry, Node, NodeKind, Resolved};

pub(super) const SITE: &str = "usr/local/lib/python3.11/site-packages";

/// One file of a wheel being built: name, bytes, unix mode.
pub(super) type Member<'a> = (&'a str, &'a [u8], u32);

pub(super) fn hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(bytes))
}

/// Writes a zip of `members` as given (no RECORD added) to `path`.
pub(super) fn zip_raw(path: &Path, members: &[Member<'_>]) {
    let f = std::fs::File::create(path).expect("create");
    let mut z = zip::ZipWriter::new(f);
    for (name, bytes, mode) in members {
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(*mode);
        z.start_file(*name, opts).expect("start");
        z.write_all(bytes).expect("write");
    }
    z.finish().expect("finish");
}

/// A wheel of `dist` `version` with `members` (below the root or `.data/`), its METADATA,
/// WHEEL, optional entry points and a RECORD of everything; returns its path and sha256.
pub(super) fn build(
    dir: &Path,
    dist: &str,
    version: &str,
    tag: &str,
    members: &[Member<'_>],
    entry_points: Option<&str>,
) -> (PathBuf, String, String) {
    build_with(dir, dist, version, tag, members, entry_points, "")
}

/// [`build`] with more `METADATA` header lines (`Requires-Dist: ...\n`).
pub(super) fn build_with(
    dir: &Path,
    dist: &str,
    version: &str,
    tag: &str,
    members: &[Member<'_>],
    entry_points: Option<&str>,
    more_metadata: &str,
) -> (PathBuf, String, String) {
    let info = format!("{dist}-{version}.dist-info");
    let metadata =
        format!("Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n{more_metadata}\n");
    let wheel_file =
        format!("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n\n");
    let mut all: Vec<(String, Vec<u8>, u32)> = members
        .iter()
        .map(|(n, b, m)| (n.to_string(), b.to_vec(), *m))
        .collect();
    all.push((format!("{info}/METADATA"), metadata.into_bytes(), 0o644));
    all.push((format!("{info}/WHEEL"), wheel_file.into_bytes(), 0o644));
    if let Some(ep) = entry_points {
        all.push((
            format!("{info}/entry_points.txt"),
            ep.as_bytes().to_vec(),
            0o644,
        ));
    }
    let mut rec = String::new();
    for (n, b, _) in &all {
        rec.push_str(&format!("{n},sha256={},{}\n", b64(b), b.len()));
    }
    rec.push_str(&format!("{info}/RECORD,,\n"));
    all.push((format!("{info}/RECORD"), rec.into_bytes(), 0o644));
    let filename = format!("{dist}-{version}-{tag}.whl");
    let path = dir.join(&filename);
    let refs: Vec<Member<'_>> = all
        .iter()
        .map(|(n, b, m)| (n.as_str(), b.as_slice(), *m))
        .collect();
    zip_raw(&path, &refs);
    let sha = hex(&std::fs::read(&path).expect("read"));
    (path, sha, filename)
}

pub(super) fn target() -> Target {
    Target {
        python: (3, 11),
        python_full: "3.11.2".to_owned(),
        arch: "x86_64".to_owned(),
        glibc: Some((2, 36)),
        site: SITE.to_owned(),
        scheme: Scheme {
            purelib: SITE.to_owned(),
            platlib: SITE.to_owned(),
            scripts: "usr/local/bin".to_owned(),
            headers: "usr/local/include/python3.11".to_owned(),
            data: "usr/local".to_owned(),
        },
        interpreter: "/usr/local/bin/python3".to_owned(),
    }
}

/// An image in memory: files by path, installed dists found from their `.dist-info` files.
pub(super) struct Img {
    pub files: BTreeMap<String, Vec<u8>>,
    pub config: serde_json::Value,
}

impl Img {
    pub fn new(files: &[(&str, &[u8])]) -> Self {
        Img {
            files: files
                .iter()
                .map(|(p, b)| (p.to_string(), b.to_vec()))
                .collect(),
            config: serde_json::json!({"architecture": "amd64"}),
        }
    }

    /// The image once `changes` are laid over it.
    pub fn apply(&mut self, changes: &[Change]) {
        let (written, hidden) = applied(changes);
        for h in hidden {
            self.files
                .retain(|p, _| p != &h && !p.starts_with(&format!("{h}/")));
        }
        for (p, (b, _)) in written {
            self.files.insert(p, b);
        }
    }

    /// Adds an installed dist `dist` `version` in SITE with `files` (relative to SITE) and a
    /// RECORD listing them.
    pub fn install(&mut self, dist: &str, version: &str, files: &[(&str, &[u8])]) {
        let info = format!("{dist}-{version}.dist-info");
        let mut all: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|(p, b)| (p.to_string(), b.to_vec()))
            .collect();
        let meta = format!("Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\n");
        all.push((format!("{info}/METADATA"), meta.into_bytes()));
        all.push((format!("{info}/INSTALLER"), b"pip\n".to_vec()));
        let mut rec = String::new();
        for (p, b) in &all {
            rec.push_str(&format!("{p},sha256={},{}\n", b64(b), b.len()));
        }
        rec.push_str(&format!("{info}/RECORD,,\n"));
        all.push((format!("{info}/RECORD"), rec.into_bytes()));
        for (p, b) in all {
            let path = super::dists::row_path(SITE, &p).expect("below /");
            self.files.insert(path, b);
        }
    }
}

impl Tree for Img {
    fn find(&self, suffix: &str) -> Vec<String> {
        self.files
            .keys()
            .filter(|p| crate::scan::has_suffix(p, suffix))
            .cloned()
            .collect()
    }
    fn file(&self, path: &str) -> Result<Option<FileEntry>, Error> {
        Ok(self.files.get(path).map(|c| FileEntry {
            path: path.to_owned(),
            kind: EntryKind::Regular,
            mode: 0o644,
            uid: 0,
            gid: 0,
            uname: None,
            gname: None,
            mtime: 5,
            content: Arc::new(c.clone()),
        }))
    }
    fn stale_bytecode(&self, path: &str) -> Vec<String> {
        let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
        let stem = file.trim_end_matches(".py");
        self.files
            .keys()
            .filter(|p| p.starts_with(&format!("{dir}/__pycache__/{stem}.")))
            .cloned()
            .collect()
    }
    fn package_version(&self, _root: &str, _package: &str) -> Option<String> {
        None
    }
    fn config(&self) -> Option<&serde_json::Value> {
        Some(&self.config)
    }
    fn resolve(&self, path: &str) -> Result<Resolved, crate::scan::LinkError> {
        let node = if self.files.contains_key(path) {
            Node::Entry(NodeKind::File)
        } else if self
            .files
            .keys()
            .any(|p| p.starts_with(&format!("{path}/")))
        {
            Node::Dir
        } else {
            Node::Absent
        };
        Ok(Resolved {
            path: path.to_owned(),
            node,
            via: Vec::new(),
        })
    }
    fn dists(&self) -> Vec<Dist> {
        let mut out: BTreeMap<String, Dist> = BTreeMap::new();
        for (p, b) in &self.files {
            let Some((dir, name)) = p.rsplit_once('/') else {
                continue;
            };
            if !dir.ends_with(".dist-info") || name.contains('/') {
                continue;
            }
            out.entry(dir.to_owned())
                .or_insert_with(|| Dist {
                    dir: dir.to_owned(),
                    files: BTreeMap::new(),
                })
                .files
                .insert(name.to_owned(), Arc::new(b.clone()));
        }
        out.into_values().collect()
    }
    fn hashed(&self, path: &str) -> Option<String> {
        self.files.get(path).map(|b| format!("sha256:{}", hex(b)))
    }
    fn bytecode_below(&self) -> Below {
        Below::Known
    }
}

/// Path -> (bytes, mode) of what changes write.
pub(super) type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// What the changes write (streamed ones read), and hide.
pub(super) fn applied(changes: &[Change]) -> (Files, Vec<String>) {
    let mut written = BTreeMap::new();
    let mut hidden = Vec::new();
    for c in changes {
        match c {
            Change::Write(e) => {
                written.insert(e.path.clone(), (e.content.to_vec(), e.mode));
            }
            Change::Stream(s) => {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut (s.open)().expect("open"), &mut b).expect("read");
                assert_eq!(b.len() as u64, s.size, "{}", s.entry.path);
                assert_eq!(hex(&b), s.sha256, "{}", s.entry.path);
                written.insert(s.entry.path.clone(), (b, s.entry.mode));
            }
            Change::Whiteout(p) => hidden.push(p.clone()),
        }
    }
    hidden.sort();
    (written, hidden)
}

fn open(
    path: &Path,
    sha: &str,
    filename: &str,
    dist: &str,
    version: &str,
) -> Result<Wheel, String> {
    wheel::open(path, filename, sha, dist, version)
}

#[test]
fn a_good_wheel_is_read_in_one_pass_with_what_install_needs() {
    let dir = tempfile::tempdir().expect("tmp");
    let big = vec![7u8; 3 << 20];
    let (path, sha, filename) = build(
        dir.path(),
        "demo_pkg",
        "1.2.0",
        "py3-none-any",
        &[
            ("demo_pkg/__init__.py", b"X = 1\n", 0o644),
            ("demo_pkg/big.bin", &big, 0o644),
            ("demo_pkg/tool.sh", b"#!/bin/sh\n", 0o755),
        ],
        None,
    );
    let w = open(&path, &sha, &filename, "demo-pkg", "1.2.0").expect("opens");
    assert_eq!((w.name.as_str(), w.version.as_str()), ("demo_pkg", "1.2.0"));
    assert_eq!(w.info_dir, "demo_pkg-1.2.0.dist-info");
    assert!(w.purelib);
    assert_eq!(w.entries.len(), 6, "{:?}", w.entries);
    let big_entry = w
        .entries
        .iter()
        .find(|e| e.name == "demo_pkg/big.bin")
        .expect("big");
    assert_eq!(big_entry.size, 3 << 20);
    assert_eq!(big_entry.sha256, hex(&big));
    let mut read = Vec::new();
    std::io::Read::read_to_end(&mut (w.opener(big_entry))().expect("open"), &mut read)
        .expect("read");
    assert!(read == big, "the opener gives the inflated entry");
    let tool = w
        .entries
        .iter()
        .find(|e| e.name.ends_with("tool.sh"))
        .expect("tool");
    assert!(tool.executable);
    assert!(!big_entry.executable);
}

#[test]
fn the_wheel_file_hash_is_checked_first() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, _, filename) = build(
        dir.path(),
        "a",
        "1.0",
        "py3-none-any",
        &[("a.py", b"", 0o644)],
        None,
    );
    let wrong = "0".repeat(64);
    let e = open(&path, &wrong, &filename, "a", "1.0").expect_err("refused");
    assert!(
        e.contains("the lock names 0000") && e.contains(&hex(&std::fs::read(&path).expect("r"))),
        "{e}"
    );
}

/// A hand-written archive with a RECORD that lists every member.
fn raw_wheel(dir: &Path, members: &[Member<'_>]) -> (PathBuf, String) {
    let info = "a-1.0.dist-info";
    let meta = b"Name: a\nVersion: 1.0\n\n".to_vec();
    let wh = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n\n".to_vec();
    let mut all: Vec<(String, Vec<u8>, u32)> = members
        .iter()
        .map(|(n, b, m)| (n.to_string(), b.to_vec(), *m))
        .collect();
    all.push((format!("{info}/METADATA"), meta, 0o644));
    all.push((format!("{info}/WHEEL"), wh, 0o644));
    let mut rec = String::new();
    for (n, b, _) in &all {
        rec.push_str(&format!("{n},sha256={},{}\n", b64(b), b.len()));
    }
    rec.push_str(&format!("{info}/RECORD,,\n"));
    all.push((format!("{info}/RECORD"), rec.into_bytes(), 0o644));
    let path = dir.join("a-1.0-py3-none-any.whl");
    let refs: Vec<Member<'_>> = all
        .iter()
        .map(|(n, b, m)| (n.as_str(), b.as_slice(), *m))
        .collect();
    zip_raw(&path, &refs);
    let sha = hex(&std::fs::read(&path).expect("read"));
    (path, sha)
}

fn refusal(dir: &Path, members: &[Member<'_>]) -> String {
    let (path, sha) = raw_wheel(dir, members);
    open(&path, &sha, "a-1.0-py3-none-any.whl", "a", "1.0").expect_err("refused")
}

#[test]
fn names_that_climb_out_or_are_absolute_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let e = refusal(dir.path(), &[("a/../../x", b"", 0o644)]);
    assert!(
        e.contains("\"a/../../x\"") && e.contains("normalized"),
        "{e}"
    );
    let e = refusal(dir.path(), &[("/etc/passwd", b"", 0o644)]);
    assert!(e.contains("absolute"), "{e}");
    let e = refusal(dir.path(), &[("a-1.0.data/bin/x", b"", 0o644)]);
    assert!(e.contains("scheme key"), "{e}");
    let e = refusal(dir.path(), &[("a/.wh.x", b"", 0o644)]);
    assert!(e.contains("whiteout"), "{e}");
}

/// Replaces every occurrence of `from` by `to` (same length) in the file.
fn patch_bytes(path: &Path, from: &[u8], to: &[u8]) {
    let mut b = std::fs::read(path).expect("read");
    let mut i = 0;
    let mut n = 0;
    while i + from.len() <= b.len() {
        if &b[i..i + from.len()] == from {
            b[i..i + from.len()].copy_from_slice(to);
            n += 1;
        }
        i += 1;
    }
    assert!(n > 0, "nothing to patch");
    std::fs::write(path, b).expect("write");
}

#[test]
fn a_name_given_twice_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, _) = raw_wheel(
        dir.path(),
        &[("a/x1.py", b"1", 0o644), ("a/x2.py", b"2", 0o644)],
    );
    patch_bytes(&path, b"a/x2.py", b"a/x1.py");
    let sha = hex(&std::fs::read(&path).expect("read"));
    let e = open(&path, &sha, "a-1.0-py3-none-any.whl", "a", "1.0").expect_err("refused");
    assert!(e.contains("twice"), "{e}");
}

/// Sets the uncompressed size of the zip member `name` in both its headers.
fn lie_about_size(path: &Path, name: &str, size: u32) {
    let mut b = std::fs::read(path).expect("read");
    let find = |b: &[u8], sig: &[u8], from: usize| {
        (from..b.len().saturating_sub(4)).find(|&i| &b[i..i + 4] == sig)
    };
    let mut at = 0;
    let mut patched = 0;
    while let Some(i) = find(&b, b"PK\x03\x04", at) {
        let n = u16::from_le_bytes([b[i + 26], b[i + 27]]) as usize;
        if &b[i + 30..i + 30 + n] == name.as_bytes() {
            b[i + 22..i + 26].copy_from_slice(&size.to_le_bytes());
            patched += 1;
        }
        at = i + 4;
    }
    at = 0;
    while let Some(i) = find(&b, b"PK\x01\x02", at) {
        let n = u16::from_le_bytes([b[i + 28], b[i + 29]]) as usize;
        if &b[i + 46..i + 46 + n] == name.as_bytes() {
            b[i + 24..i + 28].copy_from_slice(&size.to_le_bytes());
            patched += 1;
        }
        at = i + 4;
    }
    assert_eq!(patched, 2, "both headers of {name}");
    std::fs::write(path, b).expect("write");
}

#[test]
fn an_entry_larger_than_its_header_says_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let body = vec![b'x'; 5000];
    let (path, _) = raw_wheel(dir.path(), &[("a/big.py", &body, 0o644)]);
    lie_about_size(&path, "a/big.py", 100);
    let sha = hex(&std::fs::read(&path).expect("read"));
    let e = open(&path, &sha, "a-1.0-py3-none-any.whl", "a", "1.0").expect_err("refused");
    assert!(e.contains("a/big.py"), "{e}");
}

#[test]
fn a_record_that_disagrees_with_the_archive_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let info = "a-1.0.dist-info";
    let meta: &[u8] = b"Name: a\nVersion: 1.0\n\n";
    let wh: &[u8] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n\n";
    let rows = |extra: &str, skip_x: bool| {
        let mut r = String::new();
        if !skip_x {
            r.push_str(&format!("a/x.py,sha256={},2\n", b64(b"x\n")));
        }
        r.push_str(&format!(
            "{info}/METADATA,sha256={},{}\n",
            b64(meta),
            meta.len()
        ));
        r.push_str(&format!("{info}/WHEEL,sha256={},{}\n", b64(wh), wh.len()));
        r.push_str(&format!("{info}/RECORD,,\n{extra}"));
        r
    };
    let cases = [
        (rows("", true), "does not list a/x.py"),
        (rows("a/ghost.py,sha256=AAAA,1\n", false), "does not hold"),
        (
            rows("", false).replace(&b64(b"x\n"), &b64(b"y\n")),
            "a/x.py has sha256",
        ),
        (
            rows("", false).replace("a/x.py,sha256", "a/x.py,md5"),
            "no sha256",
        ),
    ];
    for (record_text, want) in cases {
        let path = dir.path().join("a-1.0-py3-none-any.whl");
        let record_path = format!("{info}/RECORD");
        let members: Vec<Member<'_>> = vec![
            ("a/x.py", b"x\n", 0o644),
            (&format!("{info}/METADATA").leak()[..], meta, 0o644),
            (&format!("{info}/WHEEL").leak()[..], wh, 0o644),
            (record_path.as_str(), record_text.as_bytes(), 0o644),
        ];
        zip_raw(&path, &members);
        let sha = hex(&std::fs::read(&path).expect("read"));
        let e = open(&path, &sha, "a-1.0-py3-none-any.whl", "a", "1.0").expect_err(want);
        assert!(e.contains(want), "{want}: {e}");
    }
}

#[test]
fn metadata_must_name_the_file_names_dist_and_version() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, sha, filename) = build(
        dir.path(),
        "a",
        "1.0",
        "py3-none-any",
        &[("a.py", b"", 0o644)],
        None,
    );
    let e = open(&path, &sha, &filename, "a", "1.1").expect_err("version");
    assert!(e.contains("version 1.0"), "{e}");
    assert!(
        open(&path, &sha, &filename, "a", "1.0.0").is_ok(),
        "1.0 is 1.0.0"
    );
    let e = open(&path, &sha, &filename, "b", "1.0").expect_err("name");
    assert!(e.contains("no b-<version>.dist-info"), "{e}");
}

const EP: &str = "[console_scripts]\ndemo = demo.cli:main\n[gui_scripts]\ndemo-gui = demo.gui:App.run\n[other]\nx = y:z\n";

#[test]
fn install_writes_what_pip_writes() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, sha, filename) = build(
        dir.path(),
        "demo",
        "2.0",
        "py3-none-any",
        &[
            ("demo/__init__.py", b"V = 2\n", 0o644),
            ("demo/cli.py", b"def main(): return 0\n", 0o755),
            (
                "demo-2.0.data/scripts/run-demo",
                b"#!python\nprint(1)\n",
                0o755,
            ),
            (
                "demo-2.0.data/scripts/plain.sh",
                b"#!/bin/sh\necho\n",
                0o644,
            ),
            ("demo-2.0.data/headers/demo.h", b"int x;\n", 0o644),
            ("demo-2.0.data/data/share/demo/d.txt", b"d\n", 0o644),
            ("demo-2.0.data/platlib/demo_ext.so", b"ELF", 0o755),
        ],
        Some(EP),
    );
    let w = open(&path, &sha, &filename, "demo", "2.0").expect("opens");
    let got = install(&w, &target(), 946684800, None).expect("installs");
    let (files, hidden) = applied(&got.changes);
    assert!(hidden.is_empty());
    let at = |p: &str| {
        files
            .get(p)
            .unwrap_or_else(|| panic!("{p} not written: {:?}", files.keys()))
    };
    assert_eq!(
        at(&format!("{SITE}/demo/__init__.py")),
        &(b"V = 2\n".to_vec(), 0o644)
    );
    assert_eq!(at(&format!("{SITE}/demo/cli.py")).1, 0o755);
    assert_eq!(
        at("usr/local/bin/run-demo"),
        &(b"#!/usr/local/bin/python3\nprint(1)\n".to_vec(), 0o755)
    );
    assert_eq!(
        at("usr/local/bin/plain.sh"),
        &(b"#!/bin/sh\necho\n".to_vec(), 0o644)
    );
    assert_eq!(
        at("usr/local/include/python3.11/demo/demo.h").0,
        b"int x;\n"
    );
    assert_eq!(at("usr/local/share/demo/d.txt").0, b"d\n");
    assert_eq!(at(&format!("{SITE}/demo_ext.so")).1, 0o755);
    let launcher = String::from_utf8(at("usr/local/bin/demo").0.clone()).expect("utf-8");
    assert_eq!(launcher, "#!/usr/local/bin/python3\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom demo.cli import main\nif __name__ == '__main__':\n    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(main())\n");
    assert_eq!(at("usr/local/bin/demo").1, 0o755);
    let gui = String::from_utf8(at("usr/local/bin/demo-gui").0.clone()).expect("utf-8");
    assert!(
        gui.contains("from demo.gui import App\n") && gui.contains("sys.exit(App.run())"),
        "{gui}"
    );
    assert!(
        !files.contains_key("usr/local/bin/x"),
        "only console and gui scripts"
    );
    let info = format!("{SITE}/demo-2.0.dist-info");
    assert_eq!(
        at(&format!("{info}/INSTALLER")),
        &(b"runner-patch\n".to_vec(), 0o644)
    );
    assert_eq!(at(&format!("{info}/REQUESTED")).0, b"");
    assert!(!files.contains_key(&format!("{info}/direct_url.json")));
    let rec = String::from_utf8(at(&format!("{info}/RECORD")).0.clone()).expect("utf-8");
    let rows = record::parse(rec.as_bytes(), "RECORD").expect("parses");
    let paths: Vec<&str> = rows.iter().map(|r| r.path.as_str()).collect();
    assert!(
        rec.ends_with("\r\n") && rec.contains("demo-2.0.dist-info/RECORD,,\r\n"),
        "{rec}"
    );
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "pip sorts the rows");
    for (p, (bytes, _)) in &files {
        if p.ends_with("/RECORD") {
            continue;
        }
        let rel = install::relative(p, SITE);
        let row = rows
            .iter()
            .find(|r| r.path == rel)
            .unwrap_or_else(|| panic!("no row for {rel}: {rec}"));
        assert_eq!(row.sha256_hex(), Some(hex(bytes)), "{rel}");
        assert_eq!(row.size(), Some(bytes.len() as u64), "{rel}");
    }
    assert!(
        paths.contains(&"../../../bin/demo") && paths.contains(&"../../../bin/run-demo"),
        "{rec}"
    );
    assert!(
        paths.contains(&"../../../include/python3.11/demo/demo.h"),
        "{rec}"
    );
    assert_eq!(rows.len(), files.len(), "{rec}");
    let all_mtime = got.changes.iter().all(|c| match c {
        Change::Write(e) => e.mtime == 946684800 && e.uid == 0,
        Change::Stream(s) => s.entry.mtime == 946684800 && s.entry.uid == 0,
        Change::Whiteout(_) => true,
    });
    assert!(all_mtime);
}

#[test]
fn a_data_script_named_as_an_entry_point_gives_way_to_the_launcher() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, sha, filename) = build(
        dir.path(),
        "demo",
        "2.0",
        "py3-none-any",
        &[
            ("demo/cli.py", b"", 0o644),
            ("demo-2.0.data/scripts/demo", b"#!python\nold\n", 0o755),
        ],
        Some("[console_scripts]\ndemo = demo.cli:main\n"),
    );
    let w = open(&path, &sha, &filename, "demo", "2.0").expect("opens");
    let (files, _) = applied(&install(&w, &target(), 0, None).expect("installs").changes);
    assert!(files["usr/local/bin/demo"]
        .0
        .starts_with(b"#!/usr/local/bin/python3\n# -*- coding"));
}

#[test]
fn bad_entry_points_are_refused() {
    for bad in [
        "[console_scripts]\nx = nocallable\n",
        "[console_scripts]\n../x = a:b\n",
        "[gui_scripts]\nx\n",
    ] {
        assert!(install::scripts(bad.as_bytes(), "ep").is_err(), "{bad}");
    }
    let long = "/opt/a very long/python";
    let s = install::Script {
        name: "x".into(),
        module: "m".into(),
        func: "f".into(),
    };
    let text = String::from_utf8(install::launcher(&s, long)).expect("utf-8");
    assert!(
        text.starts_with(
            "#!/bin/sh\n'''exec' \"/opt/a very long/python\" \"$0\" \"$@\"\n' '''\n# -*- coding"
        ),
        "{text}"
    );
}

#[test]
fn relative_paths_are_as_os_path_relpath_gives_them() {
    assert_eq!(install::relative("usr/local/bin/x", SITE), "../../../bin/x");
    assert_eq!(install::relative(&format!("{SITE}/a/b.py"), SITE), "a/b.py");
    assert_eq!(
        install::relative("usr/include/x.h", "usr/lib/python3/dist-packages"),
        "../../../include/x.h"
    );
}

fn context<'a>(
    img: &'a Img,
    written: &'a std::collections::BTreeSet<String>,
    owned: &'a std::collections::BTreeSet<String>,
) -> Context<'a> {
    Context {
        tree: img,
        written,
        owned,
        scheme: vec!["usr/local".to_owned()],
    }
}

#[test]
fn uninstall_hides_what_goes_and_nothing_shared() {
    let mut img = Img::new(&[
        ("usr/local/bin/python3", b"ELF"),
        (&format!("{SITE}/nvidia/other/keep.py").leak()[..], b"k"),
    ]);
    img.install(
        "pkg",
        "1.0",
        &[
            ("pkg/__init__.py", b"1"),
            ("pkg/old.py", b"o"),
            ("pkg/__pycache__/old.cpython-311.pyc", b"c"),
            ("pkg/sub/deep.py", b"d"),
            ("nvidia/pkgpart/lib.so", b"so"),
            ("../../../bin/pkg-cli", b"#!x"),
            ("shared.py", b"s"),
        ],
    );
    img.install(
        "other",
        "3.0",
        &[("nvidia/other/keep.py", b"k"), ("shared.py", b"s")],
    );
    let dists = img.dists();
    let old = dists
        .iter()
        .find(|d| d.dir.ends_with("pkg-1.0.dist-info"))
        .expect("pkg");
    let other = dists
        .iter()
        .find(|d| d.dir.ends_with("other-3.0.dist-info"))
        .expect("other");
    let owned = super::dists::record_paths(other)
        .expect("record")
        .into_iter()
        .collect();
    let written: std::collections::BTreeSet<String> = [
        format!("{SITE}/pkg/__init__.py"),
        format!("{SITE}/pkg/new.py"),
    ]
    .into_iter()
    .collect();
    let out = uninstall::uninstall(old, &context(&img, &written, &owned)).expect("uninstalls");
    let (_, hidden) = applied(&out);
    let s = |p: &str| format!("{SITE}/{p}");
    let want = vec![
        "usr/local/bin/pkg-cli".to_owned(),
        s("nvidia/pkgpart"),
        s("pkg-1.0.dist-info"),
        // Every listed file in it goes, so the directory goes, as pip removes it.
        s("pkg/__pycache__"),
        s("pkg/old.py"),
        s("pkg/sub"),
    ];
    assert_eq!(hidden, want);
    let written: std::collections::BTreeSet<String> = Default::default();
    let out = uninstall::uninstall(old, &context(&img, &written, &owned)).expect("removes");
    let (_, hidden) = applied(&out);
    assert!(
        hidden.contains(&s("pkg")) && !hidden.contains(&s("pkg/old.py")),
        "the emptied package goes whole: {hidden:?}"
    );
    assert!(
        !hidden
            .iter()
            .any(|h| h.ends_with("shared.py") || h == &s("nvidia")),
        "{hidden:?}"
    );
}

#[test]
fn layers_of_the_same_install_are_the_same_bytes() {
    let dir = tempfile::tempdir().expect("tmp");
    let (path, sha, filename) = build(
        dir.path(),
        "demo",
        "2.0",
        "py3-none-any",
        &[
            ("demo/__init__.py", b"V = 2\n", 0o644),
            ("demo/data.bin", &[1u8; 100_000], 0o644),
        ],
        Some(EP),
    );
    let layer = || {
        let w = open(&path, &sha, &filename, "demo", "2.0").expect("opens");
        let got = install(&w, &target(), 946684800, None).expect("installs");
        crate::layer::build_changes(
            &got.changes,
            946684800,
            "application/vnd.oci.image.layer.v1.tar+gzip",
        )
        .expect("layer")
    };
    let (a, b) = (layer(), layer());
    assert_eq!(a.digest, b.digest);
    assert_eq!(a.diff_id, b.diff_id);
}

/// A locked package: name, version, (wheel file, sha256) each.
type Locked<'a> = (&'a str, &'a str, Vec<(String, String)>);

/// A patch folder: `patch.toml` with `extra` lines, and a lock of `(name, version, wheels)`
/// whose wheels lie in the folder.
fn folder(dir: &Path, extra: &str, packages: &[Locked<'_>]) -> crate::patch::Patch {
    let mut lock = String::from("lock-version = \"1.0\"\ncreated-by = \"test\"\n");
    for (name, version, wheels) in packages {
        lock.push_str(&format!(
            "[[packages]]\nname = \"{name}\"\nversion = \"{version}\"\n"
        ));
        for (file, sha) in wheels {
            lock.push_str(&format!(
                "[[packages.wheels]]\nname = \"{file}\"\npath = \"{file}\"\nhashes = {{sha256 = \"{sha}\"}}\n"
            ));
        }
    }
    std::fs::write(dir.join("pylock.toml"), lock).expect("lock");
    let toml = format!(
        "id = \"demo-2\"\nkind = \"wheels\"\ntitle = \"demo 2\"\n{}{extra}",
        if packages.is_empty() {
            ""
        } else {
            "lock = \"pylock.toml\"\n"
        }
    );
    std::fs::write(dir.join("patch.toml"), toml).expect("toml");
    crate::patch::load_folder(dir).expect("loads")
}

/// An image with Python 3.11 in /usr/local, glibc 2.36 and demo 1.0 installed.
fn image() -> Img {
    let mut img = Img::new(&[
        ("usr/local/bin/python3.11", b"ELF"),
        ("usr/local/bin/python3", b"ELF"),
        (
            "usr/lib/x86_64-linux-gnu/libc.so.6",
            b"GNU C Library (Debian GLIBC 2.36-9) stable release version 2.36.",
        ),
    ]);
    img.install(
        "demo",
        "1.0",
        &[
            ("demo/__init__.py", b"V = 1\n"),
            ("demo/old.py", b"old\n"),
            ("../../../bin/demo-old", b"#!x\n"),
        ],
    );
    img
}

fn demo_two(dir: &Path) -> (PathBuf, String, String) {
    build(
        dir,
        "demo",
        "2.0",
        "py3-none-any",
        &[
            ("demo/__init__.py", b"V = 2\n", 0o644),
            ("demo/cli.py", b"def main(): return 0\n", 0o644),
        ],
        Some("[console_scripts]\ndemo = demo.cli:main\n"),
    )
}

#[test]
fn an_upgrade_is_decided_applied_then_already_patched_and_verified() {
    use crate::patch::Outcome;
    let dir = tempfile::tempdir().expect("tmp");
    let (_, sha, file) = demo_two(dir.path());
    let patch = folder(dir.path(), "", &[("demo", "2.0", vec![(file, sha)])]);
    let mut img = image();
    let v = patch.decide(&img);
    assert_eq!(v.outcome, Outcome::Patched, "{}", v.reason);
    assert!(
        v.reason
            .contains("demo 1.0 -> 2.0 (demo-2.0-py3-none-any.whl)"),
        "{}",
        v.reason
    );
    assert_eq!(v.about.version.as_deref(), Some("1.0"));
    let (written, hidden) = applied(&v.changes);
    let s = |p: &str| format!("{SITE}/{p}");
    assert!(
        hidden.contains(&s("demo/old.py")) && hidden.contains(&s("demo-1.0.dist-info")),
        "{hidden:?}"
    );
    assert!(
        hidden.contains(&"usr/local/bin/demo-old".to_owned()),
        "{hidden:?}"
    );
    assert!(
        !hidden.contains(&s("demo/__init__.py")) && !hidden.contains(&s("demo")),
        "{hidden:?}"
    );
    assert!(written["usr/local/bin/demo"]
        .0
        .starts_with(b"#!/usr/local/bin/python3\n"));
    crate::layer::check_changes(&v.changes).expect("a layer can hold them");
    img.apply(&v.changes);
    let again = patch.decide(&img);
    assert_eq!(again.outcome, Outcome::AlreadyPatched, "{}", again.reason);
    assert!(patch.kind().hashes(&img).contains(&s("demo/cli.py")));
    img.files.insert(s("demo/cli.py"), b"tampered".to_vec());
    let v = patch.decide(&img);
    assert_eq!(
        v.outcome,
        Outcome::Patched,
        "a tampered file is installed again"
    );
    let (_, hidden) = applied(&v.changes);
    assert!(
        hidden.is_empty(),
        "a reinstall of the same version hides nothing: {hidden:?}"
    );
}

#[test]
fn remove_uninstalls_and_then_is_already_patched() {
    use crate::patch::Outcome;
    let dir = tempfile::tempdir().expect("tmp");
    let patch = folder(dir.path(), "remove = [\"Demo\"]\n", &[]);
    let mut img = image();
    let v = patch.decide(&img);
    assert_eq!(v.outcome, Outcome::Patched, "{}", v.reason);
    assert!(v.reason.contains("demo 1.0 removed"), "{}", v.reason);
    let (written, hidden) = applied(&v.changes);
    assert!(written.is_empty());
    let s = |p: &str| format!("{SITE}/{p}");
    assert_eq!(
        hidden,
        vec![
            "usr/local/bin/demo-old".to_owned(),
            s("demo"),
            s("demo-1.0.dist-info")
        ]
    );
    img.apply(&v.changes);
    assert_eq!(patch.decide(&img).outcome, Outcome::AlreadyPatched);
}

#[test]
fn a_new_package_goes_to_target_and_refusals_name_what_is_wrong() {
    use crate::patch::Outcome;
    let dir = tempfile::tempdir().expect("tmp");
    let (_, sha, file) = build_with(
        dir.path(),
        "fresh",
        "0.1",
        "py3-none-any",
        &[("fresh.py", b"", 0o644)],
        None,
        "Requires-Dist: demo>=1.0\n",
    );
    let no_site = folder(
        dir.path(),
        "",
        &[("fresh", "0.1", vec![(file.clone(), sha.clone())])],
    );
    let v = no_site.decide(&image());
    assert_eq!(v.outcome, Outcome::Refused);
    assert!(v.reason.contains("set `package`"), "{}", v.reason);
    let by_package = folder(
        dir.path(),
        "package = \"demo\"\n",
        &[("fresh", "0.1", vec![(file.clone(), sha.clone())])],
    );
    let v = by_package.decide(&image());
    assert_eq!(v.outcome, Outcome::Patched, "{}", v.reason);
    assert!(v.reason.contains("fresh 0.1 new"), "{}", v.reason);
    let (written, _) = applied(&v.changes);
    assert!(written.contains_key(&format!("{SITE}/fresh.py")));
    let target = format!("target = \"/{SITE}\"\n");
    let wrong = folder(
        dir.path(),
        &target,
        &[("fresh", "0.1", vec![(file.clone(), "1".repeat(64))])],
    );
    let v = wrong.decide(&image());
    assert_eq!(v.outcome, Outcome::Refused);
    assert!(v.reason.contains("the lock names 1111"), "{}", v.reason);
    let mut bare = image();
    bare.files.retain(|p, _| !p.contains("demo"));
    let v = folder(dir.path(), &target, &[("fresh", "0.1", vec![(file, sha)])]).decide(&bare);
    assert_eq!(v.outcome, Outcome::Refused);
    assert!(
        v.reason.contains("demo>=1.0"),
        "unmet Requires-Dist: {}",
        v.reason
    );
}

#[test]
fn binary_wheels_are_chosen_per_architecture() {
    use crate::patch::Outcome;
    let dir = tempfile::tempdir().expect("tmp");
    let x86 = build(
        dir.path(),
        "demo",
        "2.0",
        "cp311-cp311-manylinux_2_17_x86_64",
        &[("demo/_x.so", b"x86", 0o755)],
        None,
    );
    let arm = build(
        dir.path(),
        "demo",
        "2.0",
        "cp311-cp311-manylinux_2_17_aarch64",
        &[("demo/_x.so", b"arm", 0o755)],
        None,
    );
    let patch = folder(
        dir.path(),
        "",
        &[(
            "demo",
            "2.0",
            vec![(x86.2, x86.1), (arm.2.clone(), arm.1.clone())],
        )],
    );
    let mut img = image();
    let v = patch.decide(&img);
    assert_eq!(v.outcome, Outcome::Patched, "{}", v.reason);
    let (written, _) = applied(&v.changes);
    assert_eq!(
        written[&format!("{SITE}/demo/_x.so")],
        (b"x86".to_vec(), 0o755)
    );
    img.config = serde_json::json!({"architecture": "arm64"});
    img.files.insert(
        "usr/lib/aarch64-linux-gnu/libc.so.6".into(),
        b"GNU C Library (Debian GLIBC 2.36-9) stable release version 2.36.".to_vec(),
    );
    let v = patch.decide(&img);
    assert_eq!(v.outcome, Outcome::Patched, "{}", v.reason);
    assert!(v.reason.contains("aarch64"), "{}", v.reason);
    let (written, _) = applied(&v.changes);
    assert_eq!(written[&format!("{SITE}/demo/_x.so")].0, b"arm");
    let only_arm = folder(dir.path(), "", &[("demo", "2.0", vec![(arm.2, arm.1)])]);
    img.config = serde_json::json!({"architecture": "amd64"});
    let v = only_arm.decide(&img);
    assert_eq!(v.outcome, Outcome::Refused);
    assert!(v.reason.contains("demo"), "names the package: {}", v.reason);
}

#[test]
fn patch_toml_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let write = |toml: &str| {
        std::fs::write(dir.path().join("patch.toml"), toml).expect("toml");
        crate::patch::load_folder(dir.path())
            .expect_err("refused")
            .to_string()
    };
    let head = "id = \"w\"\nkind = \"wheels\"\ntitle = \"t\"\n";
    let e = write(head);
    assert!(e.contains("names no lock and removes nothing"), "{e}");
    let e = write(&format!("{head}remove = [\"a b\"]\n"));
    assert!(
        e.contains("patch.toml:4:") && e.contains("not a distribution name"),
        "{e}"
    );
    let e = write(&format!("{head}remove = [\"A\", \"a\"]\n"));
    assert!(e.contains("named twice"), "{e}");
    let e = write(&format!("{head}lock = \"missing.toml\"\n"));
    assert!(
        e.contains("patch.toml:4:") && e.contains("missing.toml"),
        "{e}"
    );
    let e = write(&format!("{head}remove = [\"a\"]\ntarget = \"rel/dir\"\n"));
    assert!(e.contains("patch.toml:5:") && e.contains("target"), "{e}");
    let e = write(&format!("{head}remove = [\"a\"]\nbogus = 1\n"));
    assert!(e.contains("bogus"), "{e}");
    std::fs::write(dir.path().join("pylock.toml"), "lock-version = \"9\"\n").expect("lock");
    let e = write(&format!("{head}lock = \"pylock.toml\"\n"));
    assert!(e.contains("pylock.toml:1:"), "{e}");
    std::fs::write(
        dir.path().join("pylock.toml"),
        format!("lock-version = \"1.0\"\ncreated-by = \"t\"\n[[packages]]\nname = \"a\"\nversion = \"1\"\n[[packages.wheels]]\nname = \"a-1-py3-none-any.whl\"\npath = \"a-1-py3-none-any.whl\"\nhashes = {{sha256 = \"{}\"}}\n", "0".repeat(64)),
    )
    .expect("lock");
    let e = write(&format!("{head}lock = \"pylock.toml\"\nremove = [\"A\"]\n"));
    assert!(e.contains("both locked"), "{e}");
}

impl crate::patch::tree::Layered for Img {
    fn copies(&self, _suffix: &str) -> Vec<(usize, Vec<FileEntry>)> {
        Vec::new()
    }
    fn added(&self) -> std::ops::Range<usize> {
        0..0
    }
    fn refusal(&self) -> Option<&str> {
        None
    }
}

#[test]
fn verify_names_a_tampered_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_, sha, file) = demo_two(dir.path());
    let patch = folder(dir.path(), "", &[("demo", "2.0", vec![(file, sha)])]);
    let mut img = image();
    img.apply(&patch.decide(&img).changes);
    assert!(patch.kind().check(&img).problems.is_empty());
    img.files
        .insert(format!("{SITE}/demo/cli.py"), b"evil".to_vec());
    let problems = patch.kind().check(&img).problems;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with(&format!("/{SITE}/demo/cli.py has sha256:")),
        "{problems:?}"
    );
}

#[test]
fn a_wheels_layer_may_hold_the_scheme_only() {
    let p = crate::patch::load(
        "id = \"w\"\ntitle = \"t\"\nkind = \"wheels\"\nremove = [\"demo\"]\n",
        "w/patch.toml",
        None,
    )
    .expect("loads");
    let k = p.kind();
    for ok in [
        "usr/local/lib/python3.11/dist-packages/demo/__init__.py",
        "opt/venv/lib/python3.12/site-packages/demo-2.0.dist-info/RECORD",
        "usr/local/bin/demo",
        "usr/include/python3.11/demo/demo.h",
        "usr/local/share/demo/data.txt",
    ] {
        assert!(k.may_write(ok), "{ok}");
    }
    for stray in [
        "etc/passwd",
        "bin/sh",
        "usr/lib/x86_64-linux-gnu/libc.so.6",
        "root/.bashrc",
    ] {
        assert!(!k.may_write(stray), "{stray}");
    }
}
