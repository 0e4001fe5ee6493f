//! The files `pip install --no-deps --no-compile <wheel>` leaves, as layer changes: the root
//! of the wheel in purelib or platlib, `<name>-<version>.data/<key>/` spread over the scheme,
//! `.data/scripts` files whose first line starts `#!python` given the image's interpreter,
//! console and gui script launchers from `entry_points.txt` (pip 23's template, 0755),
//! `INSTALLER` (naming this tool), an empty `REQUESTED` and the `RECORD` pip would write. Wheel
//! entries are streamed from the wheel file when the layer is written; only generated files
//! and rewritten scripts are held in memory. Modes as pip gives them under umask 022: 0755 for
//! an entry with an executable bit, else 0644; owner root; the patch's mtime.

use std::collections::{BTreeMap, BTreeSet};

use super::record::{self, Row};
use super::target::{Scheme, Target};
use super::wheel::{Entry, Wheel};
use crate::patch::verdict::{Change, Streamed};
use crate::scan::FileEntry;

/// What installing one wheel writes.
#[derive(Debug, Clone)]
pub struct Installed {
    pub changes: Vec<Change>,
    /// Every path written, relative to `/`.
    pub written: BTreeSet<String>,
    /// The installed `.dist-info` directory, relative to `/`.
    pub dist_info: String,
}

/// `base` joined with a relative `rest` (either may be empty).
pub fn join(base: &str, rest: &str) -> String {
    match (base.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_owned(),
        (_, true) => base.to_owned(),
        _ => format!("{base}/{rest}"),
    }
}

/// `path` relative to the directory `from` (both relative to `/`), as `os.path.relpath` gives it.
pub fn relative(path: &str, from: &str) -> String {
    let p: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let f: Vec<&str> = from.split('/').filter(|s| !s.is_empty()).collect();
    let common = p.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<&str> = vec![".."; f.len() - common];
    parts.extend(&p[common..]);
    parts.join("/")
}

/// A console or gui script entry point: `name = module:attr.path [extras]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub name: String,
    pub module: String,
    pub func: String,
}

/// The `console_scripts` and `gui_scripts` of an `entry_points.txt`, in order.
pub fn scripts(text: &[u8], origin: &str) -> Result<Vec<Script>, String> {
    let text = std::str::from_utf8(text).map_err(|_| format!("{origin} is not UTF-8"))?;
    let mut out = Vec::new();
    let mut section = String::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.trim().to_owned();
            continue;
        }
        if section != "console_scripts" && section != "gui_scripts" {
            continue;
        }
        let bad = |what: &str| format!("{origin}:{}: {what}: {line:?}", n + 1);
        let (name, value) = line
            .split_once('=')
            .ok_or_else(|| bad("not `name = value`"))?;
        let name = name.trim();
        let value = value.split('[').next().unwrap_or("").trim();
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '+'))
            && name != "."
            && name != "..";
        if !name_ok {
            return Err(bad("a script name is letters, digits, `_-.+`"));
        }
        let (module, func) = value
            .split_once(':')
            .ok_or_else(|| bad("an entry point needs `module:function`"))?;
        let ident = |s: &str| {
            !s.is_empty()
                && s.split('.')
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
        };
        if !ident(module.trim()) || !ident(func.trim()) {
            return Err(bad("an entry point is `module:function` of Python names"));
        }
        out.push(Script {
            name: name.to_owned(),
            module: module.trim().to_owned(),
            func: func.trim().to_owned(),
        });
    }
    Ok(out)
}

/// The shebang line distlib writes for a launcher (the `/bin/sh` form for a long or spaced
/// interpreter path).
fn launcher_shebang(interpreter: &str) -> String {
    if !interpreter.contains(' ') && interpreter.len() + 3 <= 127 {
        format!("#!{interpreter}\n")
    } else {
        let exe = if interpreter.contains(' ') {
            format!("\"{interpreter}\"")
        } else {
            interpreter.to_owned()
        };
        format!("#!/bin/sh\n'''exec' {exe} \"$0\" \"$@\"\n' '''\n")
    }
}

/// A launcher's text: pip 23's script template after the shebang.
pub fn launcher(s: &Script, interpreter: &str) -> Vec<u8> {
    let import = s.func.split('.').next().unwrap_or(&s.func);
    format!(
        "{}# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {} import {import}\nif __name__ == '__main__':\n    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit({}())\n",
        launcher_shebang(interpreter),
        s.module,
        s.func
    )
    .into_bytes()
}

/// Where an archive entry lands (relative to `/`), and whether it is a `.data/scripts` file.
fn destination(w: &Wheel, e: &Entry, scheme: &Scheme, lib: &str) -> (String, bool) {
    let Some((_, rest)) = e.name.split_once('/').filter(|(t, _)| t.ends_with(".data")) else {
        return (join(lib, &e.name), false);
    };
    let (key, sub) = rest.split_once('/').unwrap_or((rest, ""));
    let base = match key {
        "purelib" => scheme.purelib.clone(),
        "platlib" => scheme.platlib.clone(),
        "scripts" => scheme.scripts.clone(),
        "headers" => join(&scheme.headers, &w.name),
        _ => scheme.data.clone(),
    };
    (join(&base, sub), key == "scripts")
}

fn file(path: &str, content: Vec<u8>, mode: u32, mtime: u64) -> Change {
    Change::Write(FileEntry::created(path.to_owned(), content, mode, mtime))
}

/// A `.data/scripts` file as pip leaves it: `#!python...` first line replaced by the
/// interpreter; `Some` when it changed.
fn fix_script(bytes: &[u8], interpreter: &str) -> Option<Vec<u8>> {
    if !bytes.starts_with(b"#!python") {
        return None;
    }
    let rest = bytes
        .iter()
        .position(|b| *b == b'\n')
        .map_or(&[][..], |i| &bytes[i + 1..]);
    let mut out = format!("#!{interpreter}\n").into_bytes();
    out.extend_from_slice(rest);
    Some(out)
}

/// The wheel's entries placed: their changes, and their `RECORD` rows as installed (by the
/// archive name; `None`: the entry is not installed and its row stays as it was).
struct Unpacked {
    changes: Vec<Change>,
    rows: BTreeMap<String, Row>,
}

/// Places every entry of `w` (`lib`: purelib or platlib; `launchers`: names whose
/// `.data/scripts` file gives way to the launcher).
fn unpack(
    w: &Wheel,
    t: &Target,
    lib: &str,
    launchers: &BTreeSet<&str>,
    mtime: u64,
) -> Result<Unpacked, String> {
    let mut out = Unpacked {
        changes: Vec::new(),
        rows: BTreeMap::new(),
    };
    let by_name: BTreeMap<&str, &Row> = w.record.iter().map(|r| (r.path.as_str(), r)).collect();
    // The files install generates in the `.dist-info` dir replace the wheel's own copies.
    let generated_here =
        ["RECORD", "INSTALLER", "REQUESTED"].map(|f| format!("{}/{f}", w.info_dir));
    for e in &w.entries {
        if generated_here.contains(&e.name) {
            continue;
        }
        let (dest, script) = destination(w, e, &t.scheme, lib);
        let mode = if e.executable { 0o755 } else { 0o644 };
        let rel = relative(&dest, lib);
        if script {
            let base = dest.rsplit('/').next().unwrap_or(&dest);
            if launchers.contains(base) {
                continue; // pip writes the launcher instead
            }
            let bytes = w.read_small(e)?;
            if let Some(fixed) = fix_script(&bytes, &t.interpreter) {
                let hex = crate::digest::sha256(&fixed);
                let hex = hex.trim_start_matches("sha256:");
                let row = Row::new(rel, hex, fixed.len() as u64)?;
                out.rows.insert(e.name.clone(), row);
                out.changes.push(file(&dest, fixed, mode, mtime));
                continue;
            }
        }
        out.changes.push(Change::Stream(Box::new(Streamed {
            entry: FileEntry::created(dest, Vec::new(), mode, mtime),
            size: e.size,
            sha256: e.sha256.clone(),
            open: w.opener(e),
        })));
        if let Some(r) = by_name.get(e.name.as_str()) {
            let row = Row {
                path: rel,
                ..(*r).clone()
            };
            out.rows.insert(e.name.clone(), row);
        }
    }
    Ok(out)
}

/// The changes installing `w` on the platform `t` makes, files stamped `mtime`.
/// `direct_url` is the `direct_url.json` of a direct URL install (PEP 610), else `None`.
pub fn install(
    w: &Wheel,
    t: &Target,
    mtime: u64,
    direct_url: Option<Vec<u8>>,
) -> Result<Installed, String> {
    let lib = if w.purelib {
        &t.scheme.purelib
    } else {
        &t.scheme.platlib
    };
    let origin = format!("wheel {}: {}/entry_points.txt", w.filename, w.info_dir);
    let launchers = match &w.entry_points {
        Some(text) => scripts(text, &origin)?,
        None => Vec::new(),
    };
    let names: BTreeSet<&str> = launchers.iter().map(|s| s.name.as_str()).collect();
    let Unpacked {
        mut changes,
        rows: placed,
    } = unpack(w, t, lib, &names, mtime)?;
    let mut rows: Vec<Row> = w
        .record
        .iter()
        .map(|r| placed.get(&r.path).unwrap_or(r).clone())
        .collect();
    let dist_info = join(lib, &w.info_dir);
    let mut generated: Vec<(String, Vec<u8>, u32)> = launchers
        .iter()
        .map(|s| {
            (
                join(&t.scheme.scripts, &s.name),
                launcher(s, &t.interpreter),
                0o755,
            )
        })
        .collect();
    generated.push((
        join(&dist_info, "INSTALLER"),
        b"runner-patch\n".to_vec(),
        0o644,
    ));
    generated.push((join(&dist_info, "REQUESTED"), Vec::new(), 0o644));
    if let Some(json) = direct_url {
        generated.push((join(&dist_info, "direct_url.json"), json, 0o644));
    }
    for (path, content, mode) in generated {
        let hex = crate::digest::sha256(&content);
        let hex = hex.trim_start_matches("sha256:");
        rows.push(Row::new(relative(&path, lib), hex, content.len() as u64)?);
        changes.push(file(&path, content, mode, mtime));
    }
    let record = record::write(&rows);
    changes.push(file(&join(&dist_info, "RECORD"), record, 0o644, mtime));
    let mut written = BTreeSet::new();
    for c in &changes {
        if !written.insert(c.path().to_owned()) {
            return Err(format!(
                "wheel {} writes /{} twice (an entry point and a file of the same name?)",
                w.filename,
                c.path()
            ));
        }
    }
    Ok(Installed {
        changes,
        written,
        dist_info,
    })
}
