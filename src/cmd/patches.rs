//! `runner-patch patches`: every patch it can see (the catalogue, and folders named with
//! `--patch PATH`), of every kind, and what each targets.

use anyhow::{anyhow, Result};
use serde_json::json;

use super::Status;
use crate::cli::{Global, PatchesArgs};
use runner_patch::patch::Patch;

pub fn run(g: &Global, a: &PatchesArgs) -> Result<Status> {
    let mut patches =
        runner_patch::patches::catalogue(g.patches_dir.as_deref()).map_err(|e| anyhow!(e))?;
    for v in g.patch.iter().filter(|v| runner_patch::patches::is_path(v)) {
        patches.push(
            runner_patch::patch::load_folder(std::path::Path::new(v)).map_err(|e| anyhow!(e))?,
        );
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
        "id": m.id, "kind": m.kind.as_str(), "title": m.title,
        "services": m.services, "backends": m.backends,
        "package": m.package, "affected": m.affected.as_ref().map(|r| r.to_string()),
        "origin": m.origin,
    });
    let extra = match p {
        Patch::Shapes(s) => json!({
            "target": s.spec.target,
            "shapes": s.spec.shapes.iter().map(|x| x.name.clone()).collect::<Vec<_>>(),
            "guards": s.spec.guards.iter().map(|x| x.target.clone()).collect::<Vec<_>>(),
        }),
        Patch::Diff(d) => json!({
            "diff": d.diff_name,
            "files": d.files.iter().map(|f| f.path().to_owned()).collect::<Vec<_>>(),
        }),
        Patch::Env(e) => json!({"set": e.set, "unset": e.unset}),
    };
    if let (Some(o), Some(x)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(x.clone());
    }
    v
}

fn text(p: &Patch) -> String {
    let m = p.meta();
    let range = match (&m.package, &m.affected) {
        (Some(pkg), Some(r)) => format!("{pkg} {r}"),
        (Some(pkg), None) => format!("{pkg} (any version)"),
        _ => "any version".to_owned(),
    };
    match p {
        // Unchanged from the single-kind listing.
        Patch::Shapes(s) => {
            let s = &s.spec;
            let mut out = format!(
                "{}\n  {}\n  target:   **/{}\n  affected: {}\n  shapes:   {}",
                s.id,
                s.title,
                s.target,
                range,
                s.shapes
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            for g in &s.guards {
                out.push_str(&format!("\n  guard:    **/{} ({})", g.target, g.class));
            }
            out
        }
        Patch::Diff(d) => format!(
            "{}\n  {}\n  kind:     diff ({})\n  affected: {}\n  files:    {}",
            m.id,
            m.title,
            d.diff_name,
            range,
            d.files
                .iter()
                .map(|f| f.path())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Patch::Env(e) => {
            let mut what: Vec<String> = e.set.iter().map(|(n, v)| format!("{n}={v}")).collect();
            what.extend(e.unset.iter().map(|n| format!("-{n}")));
            format!(
                "{}\n  {}\n  kind:     env\n  env:      {}",
                m.id,
                m.title,
                what.join(" ")
            )
        }
    }
}
