//! Stale bytecode: the compiled `.pyc` names a rewritten (or removed) Python module may have
//! below the patch's layer, which that layer must hide so the interpreter cannot load them
//! instead of the new source (a hash-based unchecked `.pyc` is loaded whatever the source says).
//!
//! Hidden are only names that can matter, because each whiteout in a `__pycache__` that no
//! lower layer holds is an entry containerd's overlayfs snapshotter shows and cannot stat
//! (`ls -l` prints `c?????????`): the `.pyc` files the tree shows (when every layer was read,
//! those are all there are), and, where layers below were not read, the names of the Python
//! versions the image can run (the version its path names, `.../python3.12/...`, else those
//! the layers read name: `lib/python3.N/`, `bin/python3.N`, installed distributions), three
//! names each (`.pyc`, `.opt-1.pyc`, `.opt-2.pyc`). Only when nothing names a version are the
//! names of every CPython 3.8 to 3.14 hidden.

use crate::patch::tree::{Below, Tree};
use crate::patch::verdict::Change;

/// The CPython minor versions hidden when nothing in the image names one.
pub const FALLBACK_MINORS: std::ops::RangeInclusive<u32> = 8..=14;
/// The CPython minor versions whose names are looked up when every layer was read.
const LOOKED_UP_MINORS: std::ops::RangeInclusive<u32> = 0..=29;
const OPT_LEVELS: [&str; 3] = ["", ".opt-1", ".opt-2"];

/// The Python 3 minor version a module's path names (`.../python3.12/...` -> 12).
pub fn path_minor(path: &str) -> Option<u32> {
    path.split('/').find_map(|c| {
        let v = c.strip_prefix("python3.")?;
        (!v.is_empty() && v.len() <= 3 && v.bytes().all(|b| b.is_ascii_digit()))
            .then(|| v.parse().ok())
            .flatten()
    })
}

/// `__pycache__/<stem>.cpython-3N[.opt-K].pyc` beside the module at `path`, for each minor
/// version given; nothing for a path that is not a `.py` module.
pub fn names(path: &str, minors: &[u32]) -> Vec<String> {
    let Some(module) = path.strip_suffix(".py") else {
        return Vec::new();
    };
    let (dir, stem) = module.rsplit_once('/').unwrap_or(("", module));
    if stem.is_empty() {
        return Vec::new();
    }
    let cache = if dir.is_empty() {
        "__pycache__".to_owned()
    } else {
        format!("{dir}/__pycache__")
    };
    let mut out = Vec::new();
    for m in minors {
        for opt in OPT_LEVELS {
            out.push(format!("{cache}/{stem}.cpython-3{m}{opt}.pyc"));
        }
    }
    out
}

/// Every name a tree that read all layers looks up for the module at `path`.
pub fn candidates(path: &str) -> Vec<String> {
    names(path, &LOOKED_UP_MINORS.collect::<Vec<_>>())
}

/// The names to hide for the module at `path` beyond the `.pyc` files the tree shows: none
/// when everything was read, else those of the interpreters the image can run.
pub fn unseen(path: &str, below: &Below) -> Vec<String> {
    match below {
        Below::Known => Vec::new(),
        Below::Unread(minors) => match path_minor(path) {
            Some(m) => names(path, &[m]),
            None if minors.is_empty() => names(path, &FALLBACK_MINORS.collect::<Vec<_>>()),
            None => names(path, minors),
        },
    }
}

/// A patch's changes plus the whiteouts for the bytecode of every module they write or remove:
/// the `.pyc` files `tree` shows and the names [`unseen`] gives. A name the same changes write,
/// or that lies below a path they hide, is left out (the layer must never hold both).
pub fn with_whiteouts(changes: &[Change], tree: &dyn Tree) -> Vec<Change> {
    let below = tree.bytecode_below();
    let mut out = changes.to_vec();
    let hidden_dirs: Vec<String> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Whiteout(p) => Some(format!("{p}/")),
            Change::Write(_) | Change::Stream(_) => None,
        })
        .collect();
    for c in changes {
        let path = c.path();
        let mut wanted = tree.stale_bytecode(path);
        wanted.extend(unseen(path, &below));
        for w in wanted {
            let covered = hidden_dirs.iter().any(|d| w.starts_with(d.as_str()));
            if !covered && !out.iter().any(|o| o.path() == w) {
                out.push(Change::Whiteout(w));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_path_then_the_image() {
        let site = "usr/lib/python3.12/site-packages/vllm/a.py";
        let w = unseen(site, &Below::Unread(vec![11]));
        assert_eq!(w.len(), 3, "the path's version wins: {w:?}");
        assert!(w.contains(
            &"usr/lib/python3.12/site-packages/vllm/__pycache__/a.cpython-312.opt-1.pyc".to_owned()
        ));
        let w = unseen("vllm-workspace/vllm/vllm/a.py", &Below::Unread(vec![11]));
        assert_eq!(
            w,
            [
                "vllm-workspace/vllm/vllm/__pycache__/a.cpython-311.pyc",
                "vllm-workspace/vllm/vllm/__pycache__/a.cpython-311.opt-1.pyc",
                "vllm-workspace/vllm/vllm/__pycache__/a.cpython-311.opt-2.pyc"
            ]
        );
        assert_eq!(
            unseen("vllm-workspace/vllm/vllm/a.py", &Below::Unread(Vec::new())).len(),
            21,
            "nothing names a version: every CPython 3.8-3.14"
        );
        assert!(unseen(site, &Below::Known).is_empty(), "all was read");
        assert!(unseen("etc/x.json", &Below::Unread(vec![11])).is_empty());
        assert!(names("top.py", &[12]).contains(&"__pycache__/top.cpython-312.pyc".to_owned()));
        assert_eq!(candidates("a/b.py").len(), 90);
        assert_eq!(path_minor("usr/lib/python3.10/x.py"), Some(10));
        assert_eq!(path_minor("usr/lib/python3.x/x.py"), None);
    }
}
