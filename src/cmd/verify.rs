//! `runner-patch verify`: check patched images, from a digest map (against their originals) or
//! by reference (structure only), through the library; print what differs. Exit 1 when
//! anything differs, naming it.

use anyhow::{bail, Result};
use serde_json::json;

use super::common::Status;
use crate::cli::{Global, VerifyArgs};
use runner_patch::digest_map::DigestMap;
use runner_patch::patch::Outcome;
use runner_patch::registry::{Registry, Repo};
use runner_patch::verify::{check_record, check_reference, Checks, ImageCheck};

/// Every image the map and the references name, checked; and the map's records skipped.
async fn check_all(
    reg: &Registry,
    checks: &Checks,
    map: Option<&DigestMap>,
    a: &VerifyArgs,
) -> Result<(Vec<ImageCheck>, Vec<String>)> {
    let with_provenance = !a.no_provenance;
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for rec in map.map(|m| m.images.as_slice()).unwrap_or_default() {
        match rec.outcome {
            Outcome::Patched => out.push(check_record(reg, checks, rec, with_provenance).await?),
            Outcome::AlreadyPatched => {
                // What the tag served (the patched image), by tag so that its companions are
                // checked too.
                let mut c = check_reference(reg, checks, &rec.target, with_provenance).await?;
                let expect = rec
                    .patched_digest
                    .as_deref()
                    .unwrap_or(&rec.original_digest);
                if c.digest != expect {
                    c.problems.push(format!(
                        "{} points at {}, not at {expect}",
                        rec.target, c.digest
                    ));
                }
                out.push(c);
            }
            other => skipped.push(format!("{} ({other})", rec.source)),
        }
    }
    for r in &a.references {
        out.push(check_reference(reg, checks, r, with_provenance).await?);
    }
    Ok((out, skipped))
}

/// The text for people: each image and platform, ok or FAIL, with what differs.
fn text(c: &ImageCheck) -> String {
    let mark = |ok: bool| if ok { "ok  " } else { "FAIL" };
    let mut out = format!("{} {}", mark(c.ok()), c.reference);
    for p in &c.problems {
        out.push_str(&format!("\n  - {p}"));
    }
    for p in &c.platforms {
        out.push_str(&format!(
            "\n  {} {:<16} {}",
            mark(p.problems.is_empty()),
            p.platform,
            p.file.as_deref().unwrap_or("")
        ));
        for x in &p.made_from {
            out.push_str(&format!("\n      made from {x}"));
        }
        for x in &p.problems {
            out.push_str(&format!("\n      - {x}"));
        }
    }
    out
}

pub fn run(g: &Global, a: &VerifyArgs) -> Result<Status> {
    let checks = Checks {
        requested: super::common::load_patches(g)?,
        known: runner_patch::patch::catalogue::catalogue(g.patches_dir.as_deref())?,
        layers: Default::default(),
    };
    if a.references.is_empty() && a.digest_map.is_none() {
        bail!("give references to check, or --digest-map PATH");
    }
    let map = a.digest_map.as_deref().map(DigestMap::read).transpose()?;
    let mut repos = Vec::new();
    for r in &a.references {
        repos.push(Repo::parse_reference(r).map_err(anyhow::Error::msg)?.0);
    }
    if let Some(m) = &map {
        repos.extend(m.repos()?);
    }
    let rt = super::common::runtime()?;
    rt.block_on(async {
        let settings = super::common::registry_settings(g);
        let reg = Registry::new(&repos.iter().collect::<Vec<_>>(), settings)?;
        let (checks, skipped) = check_all(&reg, &checks, map.as_ref(), a).await?;
        let ok = checks.iter().all(ImageCheck::ok);
        crate::summary::verify(ok, &serde_json::to_value(&checks)?, &skipped);
        if a.json {
            crate::output::print(&serde_json::to_string_pretty(
                &json!({"ok": ok, "images": checks, "skipped": skipped}),
            )?)?;
        } else {
            for c in &checks {
                crate::output::print(&text(c))?;
            }
            for s in &skipped {
                crate::output::print(&format!("skip {s}"))?;
            }
        }
        Ok(if ok { Status::Success } else { Status::Refused })
    })
}
