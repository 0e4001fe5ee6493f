//! `runner-patch patches`: what patches are known, and what each targets.

use anyhow::{anyhow, Result};
use serde_json::json;

use super::Status;
use crate::cli::{Global, PatchesArgs};

pub fn run(g: &Global, a: &PatchesArgs) -> Result<Status> {
    let specs = match &g.patches_dir {
        Some(dir) => crate::patches::from_dir(dir),
        None => crate::patches::builtin(),
    }
    .map_err(|e| anyhow!(e))?;
    if a.json {
        let list: Vec<_> = specs
            .iter()
            .map(|s| {
                json!({
                    "id": s.id, "title": s.title, "target": s.target, "package": s.package,
                    "affected": s.affected.to_string(),
                    "shapes": s.shapes.iter().map(|x| x.name.clone()).collect::<Vec<_>>(),
                    "guards": s.guards.iter().map(|x| x.target.clone()).collect::<Vec<_>>(),
                })
            })
            .collect();
        crate::output::print(&serde_json::to_string_pretty(&list)?)?;
    } else {
        for s in &specs {
            crate::output::print(&format!(
                "{}\n  {}\n  target:   **/{}\n  affected: {} {}\n  shapes:   {}",
                s.id,
                s.title,
                s.target,
                s.package,
                s.affected,
                s.shapes
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))?;
            for g in &s.guards {
                crate::output::print(&format!("  guard:    **/{} ({})", g.target, g.class))?;
            }
        }
    }
    Ok(Status::Success)
}
