//! `runner-patch lock`: plan every selected image with uv answering each platform afresh,
//! then write the patch folder's lock files from those answers through the library
//! (`resolve::locks`) and say which file covers which images.

use anyhow::{anyhow, bail, Result};

use super::common::Status;
use crate::cli::{Global, LockArgs};
use runner_patch::resolve::{locks, Mode as ResolveMode};

pub fn run(g: &Global, a: &LockArgs) -> Result<Status> {
    // Before any request: a run without requirement lines has nothing to lock.
    let patches = runner_patch::patch::catalogue::resolve(&g.patch, g.patches_dir.as_deref())?;
    if !patches
        .iter()
        .any(runner_patch::resolve::has_requirement_lines)
    {
        bail!("no patch of the run has requirement lines to lock (give --patch DIR, a wheels patch with requirements)");
    }
    let (status, resolver) = super::apply::run(
        g,
        &a.images,
        super::apply::Mode {
            dry_run: true,
            force: false,
            digest_map: None,
            provenance_dir: None,
            resolve: ResolveMode::Fresh,
            report: false,
        },
    )?;
    let asked = resolver.asked();
    if asked.is_empty() {
        bail!("no patch of the run has requirement lines to lock (give --patch DIR, a wheels patch with requirements)");
    }
    let failed: Vec<String> = asked
        .iter()
        .filter_map(|q| q.answer.as_ref().err().map(|e| format!("{}: {e}", q.label)))
        .collect();
    if !failed.is_empty() {
        for f in &failed {
            eprintln!("runner-patch: lock: {f}");
        }
        eprintln!(
            "runner-patch: lock: nothing written ({} platform(s) could not be resolved)",
            failed.len()
        );
        return Ok(Status::Refused);
    }
    let answered = asked
        .iter()
        .filter_map(|q| Some((q.label.as_str(), &q.request, q.answer.as_ref().ok()?)));
    for (folder, entries) in locks::entries(answered).map_err(|e| anyhow!("{e}"))? {
        let written = locks::write_folder(&folder, &entries).map_err(|e| anyhow!("{e}"))?;
        for (file, images) in written {
            crate::output::print(&format!(
                "{}: {}",
                folder.join(&file).display(),
                images.join(", ")
            ))?;
        }
    }
    Ok(if status == Status::Error {
        Status::Error
    } else {
        Status::Success
    })
}
