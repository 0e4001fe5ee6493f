//! `runner-patch join`: the digest maps of a run split in shards (`apply --shard K/N`, one map
//! per pipeline job) joined into one, which `verify` and `rollback` read as any map.

use anyhow::Result;

use super::common::Status;
use crate::cli::{Global, JoinArgs};

pub fn run(_g: &Global, a: &JoinArgs) -> Result<Status> {
    let joined = runner_patch::digest_map::join(&a.digest_map, &a.maps)?;
    if a.json {
        crate::output::print(&serde_json::to_string_pretty(&joined.map)?)?;
        return Ok(Status::Success);
    }
    for (path, n) in &joined.from {
        crate::output::print(&format!(
            "{:<10} {} ({n} record(s))",
            "joined",
            path.display()
        ))?;
    }
    crate::output::print(&format!(
        "{:<10} {} ({} record(s))",
        "written",
        a.digest_map.display(),
        joined.map.images.len()
    ))?;
    Ok(Status::Success)
}
