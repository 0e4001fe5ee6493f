//! `runner-patch patch-dir`: patches of any file kind on an unpacked tree, through the same
//! interface the registry path uses (decide on a tree, then write the changes).

use anyhow::Result;

use super::common::Status;
use crate::cli::{Global, PatchDirArgs};
use runner_patch::patch::dir::apply_stack;

pub fn run(g: &Global, a: &PatchDirArgs) -> Result<Status> {
    let patches = runner_patch::patch::catalogue::resolve(&g.patch, g.patches_dir.as_deref())?;
    let stacked = apply_stack(&a.root, &patches, a.dry_run)?;
    if a.json {
        crate::output::print(&stacked.json(&a.root, a.dry_run).to_string())?;
    } else {
        for line in stacked.text() {
            crate::output::print(&line)?;
        }
    }
    Ok(if stacked.refused {
        Status::Refused
    } else {
        Status::Success
    })
}
