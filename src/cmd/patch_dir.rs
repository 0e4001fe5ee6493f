//! `runner-patch patch-dir`: patches of any file kind on an unpacked tree, through the same
//! interface the registry path uses (decide on a tree, then write the changes).

use anyhow::Result;
use serde_json::json;

use super::common::Status;
use crate::cli::{Global, PatchDirArgs};
use runner_patch::patch::dir::{write_changes, DirTree};
use runner_patch::patch::{Change, Meta, Outcome, Verdict};

fn to_json(results: &[(Meta, Verdict)], a: &PatchDirArgs) -> serde_json::Value {
    let list: Vec<_> = results
        .iter()
        .map(|(m, v)| {
            let changes: Vec<_> = v
                .changes
                .iter()
                .map(|c| match c {
                    Change::Write(e) => {
                        json!({"path": e.path, "action": "write", "mode": format!("{:o}", e.mode)})
                    }
                    Change::Stream(s) => {
                        json!({"path": s.entry.path, "action": "write", "mode": format!("{:o}", s.entry.mode)})
                    }
                    Change::Whiteout(p) => json!({"path": p, "action": "whiteout"}),
                })
                .collect();
            json!({"patch": m.id, "kind": m.kind, "outcome": v.outcome.as_str(),
                   "reason": v.summary(), "changes": changes, "notes": v.notes})
        })
        .collect();
    json!({"root": a.root.display().to_string(), "dry_run": a.dry_run, "patches": list})
}

pub fn run(g: &Global, a: &PatchDirArgs) -> Result<Status> {
    let patches = runner_patch::patch::catalogue::resolve(&g.patch, g.patches_dir.as_deref())?;
    let mut results = Vec::new();
    let mut refused = false;
    for p in &patches {
        // Each patch sees the tree as the previous ones left it (stacking).
        let tree = DirTree::open(&a.root)?;
        let verdict = p.decide(&tree);
        if verdict.outcome == Outcome::Patched && !a.dry_run {
            write_changes(&a.root, &verdict.changes)?;
        }
        refused |= verdict.outcome == Outcome::Refused;
        results.push((p.meta().clone(), verdict));
        if refused {
            break;
        }
    }
    if a.json {
        crate::output::print(&to_json(&results, a).to_string())?;
    } else {
        for (m, v) in &results {
            crate::output::print(&format!("{}: {}: {}", m.id, v.outcome, v.summary()))?;
            if v.outcome == Outcome::Patched {
                for c in &v.changes {
                    let what = match c {
                        Change::Write(_) | Change::Stream(_) => "write",
                        Change::Whiteout(_) => "whiteout",
                    };
                    crate::output::print(&format!("  {what} /{}", c.path()))?;
                }
            }
        }
    }
    Ok(if refused {
        Status::Refused
    } else {
        Status::Success
    })
}
