//! Stale bytecode: the compiled `.pyc` names a rewritten Python module may have below it, which
//! the layer must hide so the interpreter cannot load them instead of the new source.

use crate::patch::verdict::Change;

/// Python tags a module's compiled bytecode may carry: the one named by the path
/// (`.../python3.12/...` -> `cpython-312`), else every CPython 3.8 to 3.14.
fn python_tags(path: &str) -> Vec<String> {
    let named = path.split('/').find_map(|c| {
        let v = c.strip_prefix("python3.")?;
        (!v.is_empty() && v.chars().all(|ch| ch.is_ascii_digit())).then(|| format!("cpython-3{v}"))
    });
    match named {
        Some(t) => vec![t],
        None => (8..=14).map(|m| format!("cpython-3{m}")).collect(),
    }
}

/// Whiteouts for every name compiled bytecode of the module at `path` can have
/// (`__pycache__/<stem>.<tag>[.opt-N].pyc`), wherever it lies in the layers below: a `.pyc`
/// left visible is loaded instead of the new source when its checks still pass (hash-based
/// unchecked pycs always do). A whiteout of a name nothing holds hides nothing, so this needs
/// no scan of the layers below.
pub fn whiteouts(path: &str) -> Vec<String> {
    let Some(module) = path.strip_suffix(".py") else {
        return Vec::new();
    };
    let (dir, stem) = module.rsplit_once('/').unwrap_or(("", module));
    let cache = if dir.is_empty() {
        "__pycache__".to_owned()
    } else {
        format!("{dir}/__pycache__")
    };
    let mut out = Vec::new();
    for tag in python_tags(path) {
        for opt in ["", ".opt-1", ".opt-2"] {
            out.push(format!("{cache}/{stem}.{tag}{opt}.pyc"));
        }
    }
    out
}

/// A patch's changes plus the whiteouts for the compiled bytecode of every module they touch
/// (the names the scan saw are among the changes already; each name is listed once).
pub fn with_whiteouts(changes: &[Change]) -> Vec<Change> {
    let mut out = changes.to_vec();
    for c in changes {
        for w in whiteouts(c.path()) {
            if !out.iter().any(|o| o.path() == w) {
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
    fn whiteouts_cover_every_name() {
        let w = whiteouts("usr/lib/python3.12/site-packages/vllm/a.py");
        assert_eq!(w.len(), 3);
        assert!(w.contains(
            &"usr/lib/python3.12/site-packages/vllm/__pycache__/a.cpython-312.opt-1.pyc".to_owned()
        ));
        let w = whiteouts("vllm-workspace/vllm/vllm/a.py");
        assert_eq!(w.len(), 21);
        assert!(w.contains(&"vllm-workspace/vllm/vllm/__pycache__/a.cpython-38.pyc".to_owned()));
        assert!(whiteouts("etc/x.json").is_empty());
    }
}
