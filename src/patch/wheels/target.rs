//! What one platform of an image offers a wheel, read from what the image shows: the Python
//! version (from the install dir's path, else from the interpreter's link), the architecture
//! (the config's), the glibc (the image's libc), and where pip would put each part of a wheel
//! (the scheme) with the interpreter its shebangs name.

use crate::patch::tree::Tree;
use crate::scan::{EntryKind, Node};

/// Where pip puts each part of a wheel, relative to `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheme {
    pub purelib: String,
    pub platlib: String,
    pub scripts: String,
    /// `usr/local/include/python3.11` (the dist name is appended by install).
    pub headers: String,
    /// The prefix (empty: `/`).
    pub data: String,
}

/// One platform of an image as a wheel install sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// (3, 11)
    pub python: (u32, u32),
    /// "3.11.2" when the image says it (the config's `PYTHON_VERSION`), else "3.11".
    pub python_full: String,
    /// "x86_64" or "aarch64".
    pub arch: String,
    /// The image's glibc, `None` when its libc could not be read.
    pub glibc: Option<(u32, u32)>,
    /// The install dir, relative to `/`.
    pub site: String,
    pub scheme: Scheme,
    /// Absolute path for shebangs.
    pub interpreter: String,
}

/// The libc files [`detect`] reads, the architecture's own first.
const LIBCS: [&str; 6] = [
    "usr/lib/x86_64-linux-gnu/libc.so.6",
    "lib/x86_64-linux-gnu/libc.so.6",
    "usr/lib/aarch64-linux-gnu/libc.so.6",
    "lib/aarch64-linux-gnu/libc.so.6",
    "usr/lib64/libc.so.6",
    "lib64/libc.so.6",
];

/// Interpreters at fixed places, read when the install dir's prefix has none.
const PYTHONS: [&str; 4] = [
    "usr/bin/python3",
    "usr/local/bin/python3",
    "usr/bin/python",
    "usr/local/bin/python",
];

/// Reads the platform a wheel would be installed on. `site`: the chosen install dir;
/// `interpreter`: patch.toml's override.
pub fn detect(tree: &dyn Tree, site: &str, interpreter: Option<&str>) -> Result<Target, String> {
    let site = site.trim_matches('/').to_owned();
    let arch = arch(tree)?;
    let (prefix, from_path) = layout(&site)?;
    let interpreter = match interpreter {
        Some(i) if i.starts_with('/') => i.to_owned(),
        Some(i) => return Err(format!("interpreter {i:?} is not an absolute path")),
        None => find_interpreter(tree, &prefix, from_path).ok_or_else(|| {
            format!(
                "no Python interpreter is visible under /{} or at /usr/bin/python3 for /{site}; \
                 set interpreter in patch.toml",
                join(&prefix, "bin")
            )
        })?,
    };
    let python = match from_path {
        Some(v) => v,
        None => version_of(tree, interpreter.trim_start_matches('/')).ok_or_else(|| {
            format!("cannot tell the Python version of /{site}: {interpreter} does not lead to a pythonX.Y")
        })?,
    };
    let xy = format!("python{}.{}", python.0, python.1);
    let venv = visible(tree, &join(&prefix, "pyvenv.cfg"));
    // Debian's pip installs to /usr/local (`posix_local`) but its headers path is built on the
    // interpreter's base, /usr: `/usr/include/pythonX.Y/<name>`.
    let debian_local = prefix == "usr/local" && site.ends_with("/dist-packages");
    let headers = if venv {
        join(&prefix, &format!("include/site/{xy}"))
    } else if debian_local {
        format!("usr/include/{xy}")
    } else {
        join(&prefix, &format!("include/{xy}"))
    };
    Ok(Target {
        python,
        python_full: python_full(tree, python, &interpreter),
        glibc: glibc(tree, &arch),
        arch,
        scheme: Scheme {
            purelib: site.clone(),
            platlib: site.clone(),
            scripts: join(&prefix, "bin"),
            headers,
            data: prefix,
        },
        site,
        interpreter,
    })
}

/// Exact paths [`detect`] reads (libc, interpreters), for `PatchKind::paths()`.
pub fn probe_paths() -> Vec<String> {
    LIBCS
        .iter()
        .chain(PYTHONS.iter())
        .map(|p| p.to_string())
        .collect()
}

/// Path suffixes [`detect`] looks for under an install dir's prefix (its interpreters, a
/// venv's `pyvenv.cfg`), for `PatchKind::wanted()`.
pub fn probe_suffixes() -> Vec<String> {
    let mut out = vec!["bin/python3".to_owned(), "bin/python".to_owned()];
    out.extend((6..=14).map(|m| format!("bin/python3.{m}")));
    out.push("pyvenv.cfg".to_owned());
    out
}

/// `root` joined with `rel` (`root` empty: `rel`).
fn join(root: &str, rel: &str) -> String {
    crate::patch::tree::join(root, rel)
}

/// The config's architecture as wheel tags name it.
fn arch(tree: &dyn Tree) -> Result<String, String> {
    let found = tree
        .config()
        .and_then(|c| c.get("architecture"))
        .and_then(|a| a.as_str());
    match found {
        Some("amd64") => Ok("x86_64".to_owned()),
        Some("arm64") => Ok("aarch64".to_owned()),
        Some(other) => Err(format!(
            "the image's architecture {other:?} is not one wheels are chosen for (amd64, arm64)"
        )),
        None => Err("the image config names no architecture".to_owned()),
    }
}

/// The prefix of an install dir and the Python X.Y its path names: `P/lib/pythonX.Y/site-packages`
/// (or `dist-packages`), or Debian's `usr/lib/python3/dist-packages` (prefix `usr`).
fn layout(site: &str) -> Result<(String, Option<(u32, u32)>), String> {
    if site == "usr/lib/python3/dist-packages" {
        return Ok(("usr".to_owned(), None));
    }
    let parts: Vec<&str> = site.split('/').collect();
    let n = parts.len();
    let fits = n >= 3
        && matches!(parts[n - 1], "site-packages" | "dist-packages")
        && parts[n - 3] == "lib";
    let version = parts.get(n.wrapping_sub(2)).and_then(|p| python_xy(p));
    match version {
        Some(v) if fits => Ok((parts[..n - 3].join("/"), Some(v))),
        _ => Err(format!(
            "cannot tell the install scheme of /{site}: pip's are <prefix>/lib/pythonX.Y/site-packages, \
             <prefix>/lib/pythonX.Y/dist-packages and /usr/lib/python3/dist-packages"
        )),
    }
}

/// (X, Y) of a name `pythonX.Y`.
fn python_xy(name: &str) -> Option<(u32, u32)> {
    let (x, y) = name.strip_prefix("python")?.split_once('.')?;
    Some((x.parse().ok()?, y.parse().ok()?))
}

/// Whether `path` shows a file or link (a link need not resolve inside what the scan read).
fn visible(tree: &dyn Tree, path: &str) -> bool {
    matches!(tree.file(path), Ok(Some(_)))
        || matches!(tree.resolve(path), Ok(r) if matches!(r.node, Node::Entry(_)))
}

/// pip's shebang: the first visible of `P/bin/python3`, `P/bin/pythonX.Y`, `P/bin/python`,
/// `/usr/bin/python3`.
fn find_interpreter(tree: &dyn Tree, prefix: &str, xy: Option<(u32, u32)>) -> Option<String> {
    let mut names = vec![join(prefix, "bin/python3")];
    if let Some((x, y)) = xy {
        names.push(join(prefix, &format!("bin/python{x}.{y}")));
    }
    names.push(join(prefix, "bin/python"));
    names.push("usr/bin/python3".to_owned());
    names
        .into_iter()
        .find(|p| visible(tree, p))
        .map(|p| format!("/{p}"))
}

/// The X.Y an interpreter's links lead to (`usr/bin/python3` -> `python3.11`).
fn version_of(tree: &dyn Tree, path: &str) -> Option<(u32, u32)> {
    let name_of = |p: &String| p.rsplit('/').next().and_then(python_xy);
    follow(tree, path).iter().rev().find_map(name_of)
}

/// The paths `path` goes through, itself first, its own links followed (not only its
/// ancestors') up to the file they lead to; empty when it cannot be resolved.
fn follow(tree: &dyn Tree, path: &str) -> Vec<String> {
    let mut hops = vec![path.to_owned()];
    let mut now = path.to_owned();
    for _ in 0..crate::scan::MAX_LINKS {
        let Ok(r) = tree.resolve(&now) else {
            return Vec::new();
        };
        now = match r.node {
            Node::Link(target) => match target.strip_prefix('/') {
                Some(abs) => abs.to_owned(),
                None => join(r.path.rsplit_once('/').map_or("", |(d, _)| d), &target),
            },
            _ => {
                hops.push(r.path);
                return hops;
            }
        };
        hops.push(now.clone());
    }
    Vec::new()
}

/// X.Y.Z: the config's `PYTHON_VERSION` (the official Python images set it) when it is of
/// this X.Y, else the `PY_VERSION` string inside the interpreter's binary (Debian's links
/// libpython in), else "X.Y".
fn python_full(tree: &dyn Tree, (x, y): (u32, u32), interpreter: &str) -> String {
    let short = format!("{x}.{y}");
    let micro = |v: &str| {
        v.strip_prefix(&format!("{short}."))
            .is_some_and(|z| !z.is_empty() && z.bytes().all(|b| b.is_ascii_digit()))
    };
    let env = tree
        .config()
        .and_then(|c| c.get("config"))
        .and_then(|c| c.get("Env"))
        .and_then(|e| e.as_array());
    let declared = env.into_iter().flatten().find_map(|v| {
        v.as_str()
            .and_then(|s| s.strip_prefix("PYTHON_VERSION="))
            .map(str::to_owned)
    });
    if let Some(v) = declared.filter(|v| micro(v)) {
        return v;
    }
    let hops = follow(tree, interpreter.trim_start_matches('/'));
    let binary = match hops.last().map(|p| tree.file(p)) {
        Some(Ok(Some(e))) if matches!(e.kind, EntryKind::Regular) => Some(e.content),
        _ => None,
    };
    binary.and_then(|b| version_in(&b, &short)).unwrap_or(short)
}

/// The first NUL-delimited `X.Y.Z` string of `short`'s X.Y in a binary.
fn version_in(bytes: &[u8], short: &str) -> Option<String> {
    let needle = format!("\0{short}.");
    let mut from = 0;
    while let Some(i) = find(&bytes[from..], needle.as_bytes()) {
        let start = from + i + 1;
        let tail = &bytes[start + needle.len() - 1..];
        let digits = tail.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits > 0 && tail.get(digits) == Some(&0) {
            let end = start + needle.len() - 1 + digits;
            return std::str::from_utf8(&bytes[start..end])
                .ok()
                .map(str::to_owned);
        }
        from = start;
    }
    None
}

/// The glibc of the image's libc for `arch` (its own multiarch dir first).
fn glibc(tree: &dyn Tree, arch: &str) -> Option<(u32, u32)> {
    let mut paths: Vec<&str> = LIBCS.iter().copied().filter(|p| p.contains(arch)).collect();
    paths.extend(LIBCS.iter().copied().filter(|p| !p.contains("-linux-gnu")));
    paths.into_iter().find_map(|p| {
        let entry = tree.file(p).ok()??;
        let entry = match &entry.kind {
            EntryKind::Regular => entry,
            _ => tree.file(follow(tree, p).last()?).ok()??,
        };
        glibc_in(&entry.content)
    })
}

/// "GNU C Library ... release version 2.36" in libc's bytes, else its highest `GLIBC_2.NN`.
fn glibc_in(bytes: &[u8]) -> Option<(u32, u32)> {
    let banner = b"release version ";
    if let Some(at) = find(bytes, b"GNU C Library") {
        if let Some(v) =
            find(&bytes[at..], banner).and_then(|i| numbers(&bytes[at + i + banner.len()..]))
        {
            return Some(v);
        }
    }
    let mut best = None;
    let mut rest = bytes;
    while let Some(i) = find(rest, b"GLIBC_") {
        rest = &rest[i + 6..];
        if let Some(v) = numbers(rest) {
            best = best.max(Some(v));
        }
    }
    best
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `A.B` at the start of `bytes`.
fn numbers(bytes: &[u8]) -> Option<(u32, u32)> {
    let digits = |b: &[u8]| b.iter().take_while(|c| c.is_ascii_digit()).count();
    let a = digits(bytes);
    if a == 0 || bytes.get(a) != Some(&b'.') {
        return None;
    }
    let b = digits(&bytes[a + 1..]);
    if b == 0 {
        return None;
    }
    let major = std::str::from_utf8(&bytes[..a]).ok()?.parse().ok()?;
    let minor = std::str::from_utf8(&bytes[a + 1..a + 1 + b])
        .ok()?
        .parse()
        .ok()?;
    Some((major, minor))
}

#[cfg(test)]
pub(crate) mod tests;
