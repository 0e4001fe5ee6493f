//! `runner-patch patch-dir`: patches of any file kind on an unpacked tree, through the same
//! interface the registry path uses (decide on a view, then write the changes).

use anyhow::{anyhow, Result};
use serde_json::json;

use super::Status;
use crate::cli::{Global, PatchDirArgs};
use runner_patch::patch::dir::{write_changes, DirView};
use runner_patch::patch::{Change, Outcome, Verdict};

pub fn run(g: &Global, a: &PatchDirArgs) -> Result<Status> {
    let patches = runner_patch::patches::resolve(&g.patch, g.patches_dir.as_deref())
        .map_err(|e| anyhow!(e))?;
    let mut results = Vec::new();
    let mut refused = false;
    for p in &patches {
        // Each patch sees the tree as the previous ones left it (stacking).
        let view = DirView::open(&a.root).map_err(|e| anyhow!(e))?;
        let verdict = p.decide(&view);
        if let Verdict::Patched { changes, .. } = &verdict {
            if !a.dry_run {
                write_changes(&a.root, changes).map_err(|e| anyhow!(e))?;
            }
        }
        refused |= verdict.outcome() == Outcome::Refused;
        results.push((p.meta().clone(), verdict));
        if refused {
            break;
        }
    }
    if a.json {
        let list: Vec<_> = results
            .iter()
            .map(|(m, v)| {
                let (changes, notes) = match v {
                    Verdict::Patched { changes, notes, .. } => (
                        changes
                            .iter()
                            .map(|c| match c {
                                Change::Write(e) => json!({"path": e.path, "action": "write", "mode": format!("{:o}", e.mode)}),
                                Change::Whiteout(p) => json!({"path": p, "action": "whiteout"}),
                            })
                            .collect::<Vec<_>>(),
                        notes.clone(),
                    ),
                    _ => (Vec::new(), Vec::new()),
                };
                json!({"patch": m.id, "kind": m.kind.as_str(), "outcome": v.outcome().as_str(),
                       "reason": v.reason(), "changes": changes, "notes": notes})
            })
            .collect();
        crate::output::print(
            &json!({"root": a.root.display().to_string(), "dry_run": a.dry_run, "patches": list})
                .to_string(),
        )?;
    } else {
        for (m, v) in &results {
            crate::output::print(&format!("{}: {}: {}", m.id, v.outcome(), v.reason()))?;
            if let Verdict::Patched { changes, .. } = v {
                for c in changes {
                    let what = match c {
                        Change::Write(_) => "write",
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
