//! `runner-patch verify`: check patched images, from a digest map (against their originals) or
//! by reference (structure only), through the library; print what differs. Exit 1 when
//! anything differs, naming it.

use anyhow::{bail, Result};
use serde_json::json;

use super::common::Status;
use crate::cli::{Global, VerifyArgs};
use runner_patch::digest_map::DigestMap;
use runner_patch::registry::{Registry, Repo};
use runner_patch::verify::{check_map, check_reference, Checks, ImageCheck};

/// Every image the map and the references name, checked; and the map's records skipped.
async fn check_all(
    reg: &Registry,
    checks: &Checks,
    map: Option<&DigestMap>,
    a: &VerifyArgs,
) -> Result<(Vec<ImageCheck>, Vec<String>)> {
    let (mut out, skipped) = match map {
        Some(m) => check_map(reg, checks, m, !a.no_provenance).await?,
        None => Default::default(),
    };
    for r in &a.references {
        out.push(check_reference(reg, checks, r, !a.no_provenance).await?);
    }
    Ok((out, skipped))
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
                crate::output::print(&c.text())?;
            }
            for s in &skipped {
                crate::output::print(&format!("skip {s}"))?;
            }
        }
        Ok(if ok { Status::Success } else { Status::Refused })
    })
}
