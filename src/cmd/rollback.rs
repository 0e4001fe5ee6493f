//! `runner-patch rollback`: put every tag a digest map moved back on its original digest,
//! through the library, and print each move.

use anyhow::Result;
use serde_json::json;

use super::common::Status;
use crate::cli::{Global, RollbackArgs};
use runner_patch::digest_map::DigestMap;
use runner_patch::registry::Registry;
use runner_patch::rollback::{provenance_kept, restore_all, wanted, Kept, Move};

fn print_text(moves: &[Move], kept: &[Kept]) -> Result<()> {
    for m in moves {
        let mut line = format!(
            "{:<24} {}  ({} -> {})",
            m.action,
            m.tag,
            m.from
                .as_deref()
                .unwrap_or(if m.error.is_some() { "?" } else { "absent" }),
            m.to
        );
        if let Some(e) = &m.error {
            line.push_str(&format!("\n{:<24} {e}", ""));
        }
        crate::output::print(&line)?;
    }
    for k in kept {
        crate::output::print(&format!(
            "{:<24} {} on {} (it describes that image, which stays by digest)",
            "provenance kept", k.provenance, k.subject
        ))?;
    }
    if moves.is_empty() {
        crate::output::print("nothing to roll back: the map records no patched image")?;
    }
    Ok(())
}

pub fn run(g: &Global, a: &RollbackArgs) -> Result<Status> {
    let map = DigestMap::read(&a.digest_map)?;
    let repos = map.repos()?;
    let todo = wanted(&map)?;
    let kept = provenance_kept(&map)?;
    let rt = super::common::runtime()?;
    rt.block_on(async {
        let settings = super::common::registry_settings(g);
        let reg = Registry::new(&repos.iter().collect::<Vec<_>>(), settings)?;
        let (moves, failed) = restore_all(&reg, &todo, a.dry_run).await;
        crate::summary::rollback(a.dry_run, &serde_json::to_value(&moves)?);
        if a.json {
            crate::output::print(&serde_json::to_string_pretty(
                &json!({"moves": moves, "failed": failed, "provenance_kept": kept}),
            )?)?;
        } else {
            print_text(&moves, &kept)?;
        }
        if failed > 0 {
            eprintln!(
                "runner-patch: error: {failed} of {} tag(s) could not be restored (named above)",
                moves.len()
            );
            return Ok(Status::Error);
        }
        Ok(Status::Success)
    })
}
