//! A `diff` relative to an absolute directory (`root = "/usr/local/Ascend/atb-models"`), as
//! `patch -p1` run there takes it: each file's path is the root joined with its path in the
//! diff, resolved as the container resolves it (symbolic links at any ancestor followed inside
//! the image, `scan::links`), and the file written at the real path. An image without the
//! directory and without any file the diff changes is not affected.

use crate::patch::error::Error;
use crate::patch::meta::{absolute, at_line};
use crate::patch::source::Source;
use crate::patch::tree::{join, Tree};
use crate::patch::verdict::Verdict;
use crate::scan::Node;

use super::unified::FileDiff;

/// The `root` of a patch.toml, checked; `affected` needs a package, so it is refused with one.
pub(super) fn read(
    src: &Source<'_>,
    root: &toml::Spanned<String>,
    affected: Option<&toml::Spanned<crate::version::VersionRange>>,
) -> Result<String, Error> {
    if let Some(a) = affected {
        return Err(at_line(
            src.origin,
            src.text,
            a.span().start,
            "affected tests the version of a package: a diff with root names none (select tags with services and backends)",
        ));
    }
    absolute(root.get_ref()).map_err(|m| {
        at_line(
            src.origin,
            src.text,
            root.span().start,
            &format!("root: {m}"),
        )
    })
}

/// The file names a diff with a root writes: the directories they land in depend on the links
/// the image holds (whether each is where it belongs is the decision `verify` makes again).
pub(super) fn writes(files: &[FileDiff]) -> Vec<String> {
    files
        .iter()
        .map(|f| f.path().rsplit('/').next().unwrap_or(f.path()).to_owned())
        .collect()
}

/// The directory `dir` as the container resolves it (a link at it followed too, as `cd`
/// follows it), as the run's messages name it; `Err` is the verdict that ends the decision: not
/// affected when neither the directory nor any file the diff changes is there.
pub(super) fn locate(
    tree: &dyn Tree,
    dir: &str,
    files: &[FileDiff],
) -> Result<String, Box<Verdict>> {
    let root = tree
        .resolve(&format!("{dir}/."))
        .map_err(|e| Box::new(Verdict::refused(format!("/{dir}: {e}"))))?;
    let label = match root.via.last() {
        Some((link, to)) => format!("{dir} (= /{} through /{link} -> {to})", root.path),
        None => dir.to_owned(),
    };
    match root.node {
        Node::Dir | Node::Absent => {}
        Node::Link(to) => {
            return Err(Box::new(Verdict::refused(format!(
                "/{label} is a symbolic link to {to:?}"
            ))))
        }
        Node::Entry(k) => {
            return Err(Box::new(Verdict::refused(format!(
                "/{label} is {}, not a directory",
                k.describe()
            ))))
        }
    }
    let present = |f: &FileDiff| {
        real_path(tree, dir, f.path())
            .ok()
            .and_then(|p| tree.file(&p).ok().flatten())
            .is_some()
    };
    if root.node == Node::Absent && !files.iter().any(present) {
        return Err(Box::new(Verdict::not_affected(format!("no /{dir} here"))));
    }
    Ok(label)
}

/// The real path of the diff's file `rel` below `dir`, links on the way followed.
pub(super) fn real_path(tree: &dyn Tree, dir: &str, rel: &str) -> Result<String, String> {
    let spelled = join(dir, rel);
    tree.resolve(&spelled)
        .map(|r| r.path)
        .map_err(|e| format!("/{spelled}: {e}"))
}
