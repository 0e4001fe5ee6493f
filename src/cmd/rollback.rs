//! `runner-patch rollback`: put every tag a digest map moved back on its original digest, but
//! only where it still points at the patched one (a tag someone moved since is left alone).

use anyhow::{anyhow, Result};
use serde_json::json;

use super::Status;
use crate::cli::{Global, RollbackArgs};
use runner_patch::digest_map::DigestMap;

/// `REPO:TAG` of a map entry, as an error this command reports.
fn split_tagged(s: &str) -> Result<(Repo, String)> {
    runner_patch::digest_map::split_tagged(s).map_err(|e| anyhow!(e))
}
use runner_patch::push::copy_image;
use runner_patch::registry::{Registry, Repo};

/// What happened to one tag.
#[derive(Debug, serde::Serialize)]
struct Move {
    tag: String,
    from: Option<String>,
    to: String,
    /// `restored`, `already original`, `would restore`, `moved since the patch; left alone`
    /// (skipped), or `failed`.
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
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
        error: None,
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

/// One tag to put back: where it is, what it was patched to, and its original.
struct Wanted<'a> {
    source: Repo,
    target: Repo,
    tag: String,
    patched: &'a str,
    original: &'a str,
}

/// The tags a map moved, companions before their multi-arch tag (so that tag is never
/// restored while a companion still points at a patched child), latest record first.
fn wanted(map: &DigestMap) -> Result<Vec<Wanted<'_>>> {
    let mut out = Vec::new();
    for rec in map.images.iter().rev() {
        let (source, _) = split_tagged(&rec.source)?;
        let (target, tag) = split_tagged(&rec.target)?;
        for c in &rec.companions {
            let Some(p) = &c.patched_digest else { continue };
            if *p == c.original_digest {
                continue;
            }
            let (crepo, ctag) = split_tagged(&c.target)?;
            out.push(Wanted {
                source: source.clone(),
                target: crepo,
                tag: ctag,
                patched: p,
                original: &c.original_digest,
            });
        }
        // An image that cannot tell its original (an already patched Docker list recorded
        // without a map) keeps its tag; its companions, which can, are still restored.
        if let Some(patched) = rec.patched_digest.as_deref().filter(|_| rec.restorable()) {
            out.push(Wanted {
                source,
                target,
                tag,
                patched,
                original: &rec.original_digest,
            });
        }
    }
    Ok(out)
}

/// The provenance artifacts a map recorded: left in place, since each describes a patched
/// image that stays in the registry by digest.
fn provenance_kept(map: &DigestMap) -> Result<Vec<serde_json::Value>> {
    let mut kept = Vec::new();
    for rec in &map.images {
        let target_repo = split_tagged(&rec.target)?.0;
        for p in &rec.platforms {
            if let (Some(prov), Some(patched)) = (&p.provenance, &p.patched_digest) {
                kept.push(json!({
                    "platform": p.platform,
                    "subject": format!("{target_repo}@{patched}"),
                    "provenance": prov.digest,
                }));
            }
        }
    }
    Ok(kept)
}

pub fn run(g: &Global, a: &RollbackArgs) -> Result<Status> {
    let map = DigestMap::read(&a.manifest).map_err(|e| anyhow!(e))?;
    let repos = map.repos().map_err(|e| anyhow!(e))?;
    let todo = wanted(&map)?;
    let kept = provenance_kept(&map)?;
    let rt = super::runtime()?;
    rt.block_on(async {
        let reg = Registry::new(
            &repos.iter().collect::<Vec<_>>(),
            super::registry_settings(g),
        )?;
        let mut moves = Vec::new();
        let mut failed = 0usize;
        // Every entry is tried: one that cannot be restored is reported and the rest go on.
        for w in &todo {
            let name = format!("{}:{}", w.target, w.tag);
            match restore(
                &reg, &w.source, &w.target, &w.tag, w.patched, w.original, a.dry_run,
            )
            .await
            {
                Ok(m) => moves.push(m),
                Err(e) => {
                    failed += 1;
                    tracing::error!("{name}: not restored: {e:#}");
                    moves.push(Move {
                        tag: name,
                        from: None,
                        to: w.original.to_owned(),
                        action: "failed",
                        error: Some(format!("{e:#}")),
                    });
                }
            }
        }
        crate::summary::rollback(a.dry_run, &serde_json::to_value(&moves)?);
        if a.json {
            crate::output::print(&serde_json::to_string_pretty(
                &json!({"moves": moves, "failed": failed, "provenance_kept": kept}),
            )?)?;
        } else {
            for m in &moves {
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
            for k in &kept {
                crate::output::print(&format!(
                    "{:<24} {} on {} (it describes that image, which stays by digest)",
                    "provenance kept",
                    k["provenance"].as_str().unwrap_or_default(),
                    k["subject"].as_str().unwrap_or_default()
                ))?;
            }
            if moves.is_empty() {
                crate::output::print("nothing to roll back: the map records no patched image")?;
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
