//! `runner-patch patches`: every patch it can see (the catalogue, and folders named with
//! `--patch PATH`), of every kind, and what each targets.

use anyhow::Result;

use super::common::Status;
use crate::cli::{Global, PatchesArgs};
use runner_patch::patch::catalogue::{catalogue, is_path};
use runner_patch::patch::{load_folder, Patch};

pub fn run(g: &Global, a: &PatchesArgs) -> Result<Status> {
    let mut patches = catalogue(g.patches_dir.as_deref())?;
    for v in g.patch.iter().filter(|v| is_path(v)) {
        patches.push(load_folder(std::path::Path::new(v))?);
    }
    if a.json {
        let list: Vec<_> = patches.iter().map(Patch::describe_json).collect();
        crate::output::print(&serde_json::to_string_pretty(&list)?)?;
    } else {
        for p in &patches {
            crate::output::print(&p.describe_text())?;
        }
    }
    Ok(Status::Success)
}
