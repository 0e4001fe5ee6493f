//! `runner-patch patches`: every patch it can see (the catalogue, and folders named with
//! `--patch PATH`), of every kind, and what each targets.

use anyhow::Result;
use serde_json::json;

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
        let list: Vec<_> = patches.iter().map(describe).collect();
        crate::output::print(&serde_json::to_string_pretty(&list)?)?;
    } else {
        for p in &patches {
            crate::output::print(&text(p))?;
        }
    }
    Ok(Status::Success)
}

fn describe(p: &Patch) -> serde_json::Value {
    let m = p.meta();
    let mut v = json!({
        "id": m.id, "kind": m.kind, "title": m.title,
        "services": m.services, "backends": m.backends,
        "package": m.package, "affected": m.affected.as_ref().map(|r| r.to_string()),
        "origin": m.origin,
    });
    if let Some(o) = v.as_object_mut() {
        o.extend(p.kind().describe().fields);
    }
    v
}

/// The id, the title, then the kind's labelled lines (`  label:    value`).
fn text(p: &Patch) -> String {
    let m = p.meta();
    let mut out = format!("{}\n  {}", m.id, m.title);
    for (label, value) in p.kind().describe().lines {
        out.push_str(&format!("\n  {:<10}{value}", format!("{label}:")));
    }
    out
}
