use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::patch::error::Error;
use crate::scan::{self, FileEntry, LinkError, NodeKind, Resolved};

/// A target for other modules' tests: CPython `py` on `arch` with `glibc`, site under /usr/local.
pub(crate) fn target(arch: &str, py: (u32, u32), glibc: Option<(u32, u32)>) -> Target {
    let site = format!("usr/local/lib/python{}.{}/dist-packages", py.0, py.1);
    Target {
        python: py,
        python_full: format!("{}.{}.2", py.0, py.1),
        arch: arch.to_owned(),
        glibc,
        site: site.clone(),
        scheme: Scheme {
            purelib: site.clone(),
            platlib: site,
            scripts: "usr/local/bin".to_owned(),
            headers: format!("usr/local/include/python{}.{}", py.0, py.1),
            data: "usr/local".to_owned(),
        },
        interpreter: "/usr/bin/python3".to_owned(),
    }
}

/// An image: regular files and symbolic links by path, and a config.
struct Img {
    files: BTreeMap<String, Vec<u8>>,
    links: BTreeMap<String, String>,
    config: serde_json::Value,
}

impl Img {
    fn new(arch: &str) -> Self {
        Img {
            files: BTreeMap::new(),
            links: BTreeMap::new(),
            config: serde_json::json!({"architecture": arch, "os": "linux", "config": {"Env": ["PATH=/usr/bin"]}}),
        }
    }
    fn file(mut self, path: &str, content: &[u8]) -> Self {
        self.files.insert(path.to_owned(), content.to_vec());
        self
    }
    fn link(mut self, path: &str, target: &str) -> Self {
        self.links.insert(path.to_owned(), target.to_owned());
        self
    }
    fn node(&self, p: &str) -> scan::Node {
        if let Some(t) = self.links.get(p) {
            scan::Node::Link(t.clone())
        } else if self.files.contains_key(p) {
            scan::Node::Entry(NodeKind::File)
        } else {
            scan::Node::Absent
        }
    }
}

impl crate::patch::tree::Tree for Img {
    fn find(&self, suffix: &str) -> Vec<String> {
        self.files
            .keys()
            .chain(self.links.keys())
            .filter(|p| scan::has_suffix(p, suffix))
            .cloned()
            .collect()
    }
    fn file(&self, path: &str) -> Result<Option<FileEntry>, Error> {
        let kind = match (self.links.get(path), self.files.get(path)) {
            (Some(t), _) => EntryKind::Symlink(t.clone()),
            (None, Some(_)) => EntryKind::Regular,
            (None, None) => return Ok(None),
        };
        let content = self.files.get(path).cloned().unwrap_or_default();
        Ok(Some(FileEntry {
            path: path.to_owned(),
            kind,
            mode: 0o755,
            uid: 0,
            gid: 0,
            uname: None,
            gname: None,
            mtime: 0,
            content: Arc::new(content),
        }))
    }
    fn stale_bytecode(&self, _path: &str) -> Vec<String> {
        Vec::new()
    }
    fn package_version(&self, _root: &str, _package: &str) -> Option<String> {
        None
    }
    fn config(&self) -> Option<&serde_json::Value> {
        Some(&self.config)
    }
    fn resolve(&self, path: &str) -> Result<Resolved, LinkError> {
        scan::resolve(path, |p| self.node(p))
    }
}

const LIBC: &[u8] = b"\x7fELF..GLIBC_2.2.5\0GLIBC_2.34\0GLIBC_PRIVATE\0GNU C Library (Debian GLIBC 2.36-9+deb12u4) stable release version 2.36.\n";

#[test]
fn debian_system_python_reads_version_through_link_and_libc_banner() {
    let img = Img::new("amd64")
        .file("usr/bin/python3.11", b"ELF")
        .link("usr/bin/python3", "python3.11")
        .file("usr/lib/x86_64-linux-gnu/libc.so.6", LIBC);
    let t = detect(&img, "/usr/lib/python3/dist-packages", None).expect("detects");
    assert_eq!(t.python, (3, 11));
    assert_eq!(t.python_full, "3.11");
    assert_eq!(t.arch, "x86_64");
    assert_eq!(t.glibc, Some((2, 36)));
    assert_eq!(t.site, "usr/lib/python3/dist-packages");
    assert_eq!(t.interpreter, "/usr/bin/python3");
    assert_eq!(
        t.scheme,
        Scheme {
            purelib: "usr/lib/python3/dist-packages".into(),
            platlib: "usr/lib/python3/dist-packages".into(),
            scripts: "usr/bin".into(),
            headers: "usr/include/python3.11".into(),
            data: "usr".into(),
        }
    );
}

#[test]
fn debian_python_full_version_from_the_interpreter_binary() {
    let img = Img::new("amd64")
        .file(
            "usr/bin/python3.11",
            b"\x7fELF\x003.11\0%s.%s\x003.11.x\x003.11.2\x00main",
        )
        .link("usr/bin/python3", "python3.11");
    let t = detect(&img, "usr/local/lib/python3.11/dist-packages", None).expect("detects");
    assert_eq!(t.python_full, "3.11.2");
    assert_eq!(t.interpreter, "/usr/bin/python3");
}

#[test]
fn version_strings_in_binaries() {
    assert_eq!(
        version_in(b"\x003.12.10\x00", "3.12").as_deref(),
        Some("3.12.10")
    );
    assert_eq!(version_in(b"\x003.12.1+\x003.12.", "3.12"), None);
    assert_eq!(version_in(b"x3.12.1\x00", "3.12"), None);
    assert_eq!(version_in(b"\x003.11.4\x00", "3.12"), None);
}

#[test]
fn local_dist_packages_on_arm64_with_usr_merge_link() {
    // Debian's usr-merge: /lib -> usr/lib; libc only under the arm64 multiarch dir.
    let img = Img::new("arm64")
        .file("usr/bin/python3.12", b"ELF")
        .link("usr/bin/python3", "python3.12")
        .link("lib", "usr/lib")
        .file(
            "usr/lib/aarch64-linux-gnu/libc.so.6",
            b"..GLIBC_2.17\0GLIBC_2.39\0GLIBC_2.4\0",
        );
    let t = detect(&img, "usr/local/lib/python3.12/dist-packages", None).expect("detects");
    assert_eq!(
        (t.python, t.arch.as_str(), t.glibc),
        ((3, 12), "aarch64", Some((2, 39)))
    );
    assert_eq!(t.scheme.scripts, "usr/local/bin");
    // Debian's posix_local scheme: headers on the interpreter's base, as its pip puts them.
    assert_eq!(t.scheme.headers, "usr/include/python3.12");
    assert_eq!(t.scheme.data, "usr/local");
    // /usr/local/bin/python3 is not there: pip's sys.executable is Debian's.
    assert_eq!(t.interpreter, "/usr/bin/python3");
}

#[test]
fn venv_uses_its_own_interpreter_headers_and_the_config_python_version() {
    let mut img = Img::new("amd64")
        .link("opt/venv/bin/python3", "/usr/local/bin/python3.12")
        .file("opt/venv/pyvenv.cfg", b"home = /usr/local/bin\n")
        .file("usr/local/bin/python3.12", b"ELF");
    img.config["config"]["Env"] = serde_json::json!(["PYTHON_VERSION=3.12.7"]);
    let t = detect(&img, "opt/venv/lib/python3.12/site-packages", None).expect("detects");
    assert_eq!(t.interpreter, "/opt/venv/bin/python3");
    assert_eq!(t.python_full, "3.12.7");
    assert_eq!(t.scheme.headers, "opt/venv/include/site/python3.12");
    assert_eq!(t.scheme.scripts, "opt/venv/bin");
    assert_eq!(t.glibc, None, "no libc in this image");
    // A PYTHON_VERSION of another minor is not believed.
    img.config["config"]["Env"] = serde_json::json!(["PYTHON_VERSION=3.11.9"]);
    let t = detect(
        &img,
        "opt/venv/lib/python3.12/site-packages",
        Some("/usr/bin/env-python"),
    )
    .expect("detects");
    assert_eq!(t.python_full, "3.12");
    assert_eq!(t.interpreter, "/usr/bin/env-python");
}

#[test]
fn refusals_name_what_is_wrong() {
    let img = Img::new("amd64").file("usr/bin/python3", b"ELF");
    let e = detect(&img, "usr/lib/python3/dist-packages", None).expect_err("no X.Y");
    assert!(
        e.contains("cannot tell the Python version of /usr/lib/python3/dist-packages"),
        "{e}"
    );
    let e = detect(&img, "srv/app/vendor", None).expect_err("no scheme");
    assert!(
        e.starts_with("cannot tell the install scheme of /srv/app/vendor"),
        "{e}"
    );
    let e = detect(&Img::new("s390x"), "usr/lib/python3.11/site-packages", None).expect_err("arch");
    assert!(e.contains("\"s390x\""), "{e}");
    let e = detect(
        &Img::new("amd64"),
        "usr/local/lib/python3.11/site-packages",
        None,
    )
    .expect_err("no python");
    assert!(
        e.contains("no Python interpreter is visible under /usr/local/bin"),
        "{e}"
    );
    let e = detect(
        &img,
        "usr/local/lib/python3.11/site-packages",
        Some("python3"),
    )
    .expect_err("relative");
    assert!(e.contains("not an absolute path"), "{e}");
}

#[test]
fn an_old_libc_link_is_followed_to_its_file() {
    // glibc before 2.34: libc.so.6 -> libc-2.31.so.
    let img = Img::new("amd64")
        .file("usr/bin/python3.9", b"ELF")
        .link("usr/bin/python3", "python3.9")
        .link("lib/x86_64-linux-gnu/libc.so.6", "libc-2.31.so")
        .file(
            "lib/x86_64-linux-gnu/libc-2.31.so",
            b"GLIBC_2.30\0GLIBC_2.31\0",
        );
    let t = detect(&img, "usr/lib/python3/dist-packages", None).expect("detects");
    assert_eq!((t.python, t.glibc), ((3, 9), Some((2, 31))));
}

#[test]
fn glibc_from_banner_or_highest_symbol_version() {
    assert_eq!(glibc_in(LIBC), Some((2, 36)));
    assert_eq!(glibc_in(b"GLIBC_2.2.5 GLIBC_2.28 GLIBC_2.3"), Some((2, 28)));
    assert_eq!(glibc_in(b"musl libc"), None);
    assert_eq!(glibc_in(b""), None);
}

#[test]
fn probes_cover_both_architectures_and_interpreters() {
    let p = probe_paths();
    for want in [
        "usr/lib/x86_64-linux-gnu/libc.so.6",
        "lib/aarch64-linux-gnu/libc.so.6",
        "usr/bin/python3",
    ] {
        assert!(p.contains(&want.to_owned()), "{want}");
    }
    assert!(probe_suffixes().contains(&"pyvenv.cfg".to_owned()));
}
