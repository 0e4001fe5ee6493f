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

pub fn run(g: &Global, a: &VerifyArgs) -> Result<Status> {
    let against = Checks {
        requested: super::common::load_patches(g)?,
        known: runner_patch::patch::catalogue::catalogue(g.patches_dir.as_deref())?,
        layers: Default::default(),
        resolver: std::sync::Arc::new(runner_patch::resolve::Resolver::new(
            g.bounds.limits().idle,
            runner_patch::resolve::Mode::Auto,
        )),
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
        let with_provenance = !a.no_provenance;
        let (mut checks, skipped) = match &map {
            Some(m) => check_map(&reg, &against, m, with_provenance).await?,
            None => Default::default(),
        };
        for r in &a.references {
            checks.push(check_reference(&reg, &against, r, with_provenance).await?);
        }
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
