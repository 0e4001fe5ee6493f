//! `verify`'s check of a `shapes` patch on a patched image (as before stacking existed): the
//! top-most copy of each file comes from a layer this tool added, has the patched shape, has no
//! other copy below it that the patch does not cover, and no stale bytecode is visible.

use super::spec::PatchSpec;
use crate::patch::outcome::Outcome;
use crate::patch::tree::Layered;
use crate::patch::verdict::Checked;
use crate::scan::{EntryKind, FileEntry};

/// Checks one file of the patch, adding what it finds to `checked`.
pub(super) fn shape_seen(image: &dyn Layered, spec: &PatchSpec, checked: &mut Checked) {
    let hits = image.copies(&spec.target);
    let Some((index, entries)) = hits.first() else {
        if image.refusal().is_none() {
            checked.problems.push(image.explain_missing(&spec.target));
        }
        return;
    };
    let Some(entry) = entries.last() else { return };
    checked.file = Some(format!("/{}", entry.path));
    checked.seen.file = checked.file.clone();
    checked.seen.by = Some(spec.id.clone());
    let on_top = image.added().contains(index);
    if on_top {
        checked.seen.patched_file = Some(crate::digest::sha256(&entry.content));
    }
    checked.seen.original_file = hits
        .get(1)
        .and_then(|(_, lower)| lower.iter().rev().find(|l| l.path == entry.path))
        .filter(|l| l.kind == EntryKind::Regular)
        .map(|l| crate::digest::sha256(&l.content));
    if !on_top {
        checked.problems.push(format!(
            "the visible /{} comes from layer {index}, not from the patch layer",
            entry.path
        ));
    }
    shape_of(spec, entry, &mut checked.problems);
    if let Some((_, lower)) = hits.get(1) {
        if let Some(l) = lower.iter().find(|l| l.path != entry.path) {
            checked.problems.push(format!(
                "a lower layer holds another copy at /{}, which the patch does not cover",
                l.path
            ));
        }
    }
    for pyc in image.stale_bytecode(&entry.path) {
        let problem = format!("stale bytecode /{pyc} is visible");
        if !checked.problems.contains(&problem) {
            checked.problems.push(problem);
        }
    }
}

/// The visible copy must be a regular file of the patched shape.
fn shape_of(spec: &PatchSpec, entry: &FileEntry, problems: &mut Vec<String>) {
    if entry.kind != EntryKind::Regular {
        problems.push(format!("the visible /{} is not a regular file", entry.path));
        return;
    }
    let d = spec.decide(&entry.content);
    match d.outcome {
        Outcome::AlreadyPatched => {}
        Outcome::Refused => problems.push(format!(
            "the visible /{} is not the patched shape: {}",
            entry.path, d.reason
        )),
        other => problems.push(format!(
            "the visible /{} is not the patched shape ({other})",
            entry.path
        )),
    }
}
