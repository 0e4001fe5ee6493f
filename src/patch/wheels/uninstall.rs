//! Uninstalling an installed distribution as pip does, with whiteouts in the patch's layer:
//! every visible file its `RECORD` lists inside the install scheme that the layer does not
//! write again, its `.dist-info` directory (whole, unless the new version writes the same
//! directory), and each package directory the removal empties (pip removes a directory holding
//! a listed file when everything below it goes; a directory left behind would still import as
//! a namespace package). Never hidden: a path the layer writes, a path another installed
//! distribution's `RECORD` lists or a directory holding one (shared `nvidia/`, `google/`), the
//! install dirs themselves. A `__pycache__` whose listed bytecode all goes goes whole, as pip
//! removes it; the bytecode of removed modules is added by the caller (`patch::bytecode`).

use std::collections::BTreeSet;

use super::dists::{record_paths, site_of};
use super::install::join;
use crate::patch::dist::Dist;
use crate::patch::tree::Tree;
use crate::patch::verdict::Change;
use crate::scan::Node;

/// Whether `path` is `dir` or lies below it (`dir` empty: the root, which holds everything).
pub fn under(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// What one uninstall must respect.
pub struct Context<'a> {
    pub tree: &'a dyn Tree,
    /// Paths the same layer writes.
    pub written: &'a BTreeSet<String>,
    /// Paths other installed distributions' `RECORD`s list.
    pub owned: &'a BTreeSet<String>,
    /// Directories a listed path may lie in to be removed (the scheme's prefix and site dir).
    pub scheme: Vec<String>,
}

impl Context<'_> {
    fn visible(&self, path: &str) -> Option<(String, bool)> {
        let r = self.tree.resolve(path).ok()?;
        match r.node {
            Node::Absent => None,
            Node::Dir => Some((r.path, true)),
            _ => Some((r.path, false)),
        }
    }

    fn keeps_something_under(&self, dir: &str) -> bool {
        let below = |p: &String| p.starts_with(&format!("{dir}/"));
        self.written.iter().any(below) || self.owned.iter().any(below)
    }
}

/// The whiteouts uninstalling `old` takes.
pub fn uninstall(old: &Dist, cx: &Context<'_>) -> Result<Vec<Change>, String> {
    let site = site_of(old);
    let listed = record_paths(old)?;
    let mut hidden: BTreeSet<String> = BTreeSet::new();
    let mut dirs: BTreeSet<String> = BTreeSet::new();
    dirs.insert(old.dir.clone());
    for p in &listed {
        if !cx.scheme.iter().any(|d| under(p, d)) {
            continue;
        }
        let Some((real, is_dir)) = cx.visible(p) else {
            continue;
        };
        if is_dir || cx.written.contains(&real) || cx.owned.contains(&real) {
            continue;
        }
        if let Some((parent, _)) = real.rsplit_once('/') {
            if under(parent, site) && parent != site {
                dirs.insert(parent.to_owned());
            }
        }
        hidden.insert(real);
    }
    for d in &old.files {
        // Files of the dist-info the RECORD may not list (a hand-made dist).
        let path = join(&old.dir, d.0);
        if !cx.written.contains(&path) && cx.visible(&path).is_some() {
            hidden.insert(path);
        }
    }
    let mut whole: Vec<String> = dirs
        .into_iter()
        .filter(|d| !cx.keeps_something_under(d))
        .filter(|d| matches!(cx.visible(d), Some((_, true))))
        .collect();
    whole.sort();
    let mut kept_dirs: Vec<String> = Vec::new();
    for d in whole {
        if !kept_dirs.iter().any(|k| under(&d, k)) {
            kept_dirs.push(d);
        }
    }
    let mut out: Vec<Change> = kept_dirs.iter().cloned().map(Change::Whiteout).collect();
    out.extend(
        hidden
            .into_iter()
            .filter(|p| !kept_dirs.iter().any(|d| under(p, d)))
            .map(Change::Whiteout),
    );
    Ok(out)
}
