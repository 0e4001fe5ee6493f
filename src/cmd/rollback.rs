//! `runner-patch rollback`: put every tag a digest map moved back on its original digest, but
//! only where it still points at the patched one (a tag someone moved since is left alone).

use anyhow::{anyhow, Result};
use serde_json::json;

use super::Status;
use crate::cli::{Global, RollbackArgs};
use crate::digest_map::DigestMap;

/// `REPO:TAG` of a map entry, as an error this command reports.
fn split_tagged(s: &str) -> Result<(Repo, String)> {
    crate::digest_map::split_tagged(s).map_err(|e| anyhow!(e))
}
use crate::push::copy_image;
use crate::registry::{Registry, Repo};

/// What happened to one tag.
#[derive(Debug, serde::Serialize)]
struct Move {
    tag: String,
    from: Option<String>,
    to: String,
    action: &'static str,
}

/// Moves `tag` in `target` from `patched` back to `original` (read from `source`).
async fn restore(
    reg: &Registry,
    source: &Repo,
    target: &Repo,
    tag: &str,
    patched: &str,
    original: &str,
    dry_run: bool,
) -> Result<Move> {
    let name = format!("{target}:{tag}");
    let now = reg.manifest_digest(&target.at_tag(tag)).await?;
    let mut m = Move {
        tag: name.clone(),
        from: now.clone(),
        to: original.to_owned(),
        action: "",
    };
    if now.as_deref() == Some(original) {
        m.action = "already original";
        return Ok(m);
    }
    if now.as_deref() != Some(patched) {
        m.action = "moved since the patch; left alone";
        return Ok(m);
    }
    if dry_run {
        m.action = "would restore";
        return Ok(m);
    }
    let doc = reg.manifest_get(&source.at_digest(original)).await?;
    copy_image(reg, source, target, &doc).await?;
    reg.manifest_put(&target.at_tag(tag), &doc).await?;
    let served = reg.manifest_digest(&target.at_tag(tag)).await?;
    if served.as_deref() != Some(original) {
        return Err(anyhow!(
            "{name} serves {} after the rollback, not {original}",
            served.as_deref().unwrap_or("nothing")
        ));
    }
    m.action = "restored";
    Ok(m)
}

pub fn run(_g: &Global, a: &RollbackArgs) -> Result<Status> {
    let map = DigestMap::read(&a.manifest).map_err(|e| anyhow!(e))?;
    let repos = map.repos().map_err(|e| anyhow!(e))?;
    let rt = super::runtime()?;
    rt.block_on(async {
        let reg = Registry::new(&repos.iter().collect::<Vec<_>>());
        let mut moves = Vec::new();
        for rec in map.images.iter().filter(|r| r.outcome == "patched") {
            let Some(patched) = &rec.patched_digest else {
                continue;
            };
            let (source, _) = split_tagged(&rec.source)?;
            let (target, tag) = split_tagged(&rec.target)?;
            // Companions first, so the multi-arch tag is never restored while a companion
            // still points at a patched child.
            for c in rec.companions.iter().filter(|c| c.moved) {
                let (crepo, ctag) = split_tagged(&c.target)?;
                if let Some(p) = &c.patched_digest {
                    moves.push(
                        restore(
                            &reg,
                            &source,
                            &crepo,
                            &ctag,
                            p,
                            &c.original_digest,
                            a.dry_run,
                        )
                        .await?,
                    );
                }
            }
            moves.push(
                restore(
                    &reg,
                    &source,
                    &target,
                    &tag,
                    patched,
                    &rec.original_digest,
                    a.dry_run,
                )
                .await?,
            );
        }
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({"moves": moves}))?
            );
        } else {
            for m in &moves {
                println!(
                    "{:<24} {}  ({} -> {})",
                    m.action,
                    m.tag,
                    m.from.as_deref().unwrap_or("absent"),
                    m.to
                );
            }
            if moves.is_empty() {
                println!("nothing to roll back: the map records no patched image");
            }
        }
        Ok(Status::Success)
    })
}
