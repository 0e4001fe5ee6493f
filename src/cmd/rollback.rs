//! `runner-patch rollback`: put every tag a digest map moved back on its original digest,
//! through the library, and print each move.

use anyhow::Result;
use serde_json::json;

use super::common::Status;
use crate::cli::{Global, RollbackArgs};
use runner_patch::digest_map::DigestMap;
use runner_patch::registry::Registry;
use runner_patch::rollback::{provenance_kept, restore_all, text, wanted};

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
            for line in text(&moves, &kept) {
                crate::output::print(&line)?;
            }
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
