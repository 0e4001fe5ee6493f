//! Putting every tag a digest map moved back on its original digest, but only where it still
//! points at the patched one (a tag someone moved since is left alone). Provenance artifacts
//! stay: each describes a patched image that stays in the registry by digest.

use serde::Serialize;

use crate::digest_map::{split_tagged, DigestMap};
use crate::push::copy_image;
use crate::registry::{Registry, RegistryError, Repo};

/// Why a tag could not be restored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Push(#[from] crate::push::Error),
    #[error(transparent)]
    Map(#[from] crate::digest_map::Error),
    /// The tag serves something else right after it was restored.
    #[error("{0}")]
    Served(String),
}

/// What happened to one tag.
#[derive(Debug, Clone, Serialize)]
pub struct Move {
    pub tag: String,
    pub from: Option<String>,
    pub to: String,
    /// `restored`, `already original`, `would restore`, `moved since the patch; left alone`
    /// (skipped), or `failed`.
    pub action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One tag to put back: where it is, what it was patched to, and its original.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub source: Repo,
    pub target: Repo,
    pub tag: String,
    pub patched: String,
    pub original: String,
}

/// A provenance artifact a map recorded, which a rollback leaves in place.
#[derive(Debug, Clone, Serialize)]
pub struct Kept {
    pub platform: String,
    /// `REPO@DIGEST` of the patched image it describes.
    pub subject: String,
    pub provenance: String,
}

/// The tags a map moved, companions before their multi-arch tag (so that tag is never
/// restored while a companion still points at a patched child), latest record first.
pub fn wanted(map: &DigestMap) -> Result<Vec<Wanted>, Error> {
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
                patched: p.clone(),
                original: c.original_digest.clone(),
            });
        }
        // An image that cannot tell its original (an already patched Docker list recorded
        // without a map) keeps its tag; its companions, which can, are still restored.
        if let Some(patched) = rec.patched_digest.as_deref().filter(|_| rec.restorable()) {
            out.push(Wanted {
                source,
                target,
                tag,
                patched: patched.to_owned(),
                original: rec.original_digest.clone(),
            });
        }
    }
    Ok(out)
}

/// The provenance artifacts a map recorded.
pub fn provenance_kept(map: &DigestMap) -> Result<Vec<Kept>, Error> {
    let mut kept = Vec::new();
    for rec in &map.images {
        let target_repo = split_tagged(&rec.target)?.0;
        for p in &rec.platforms {
            if let (Some(prov), Some(patched)) = (&p.provenance, &p.patched_digest) {
                kept.push(Kept {
                    platform: p.platform.clone(),
                    subject: format!("{target_repo}@{patched}"),
                    provenance: prov.digest.clone(),
                });
            }
        }
    }
    Ok(kept)
}

/// Moves one tag from its patched digest back to its original (read from its source), unless
/// it no longer points at the patched one.
pub async fn restore(reg: &Registry, w: &Wanted, dry_run: bool) -> Result<Move, Error> {
    let name = format!("{}:{}", w.target, w.tag);
    let now = reg.manifest_digest(&w.target.at_tag(&w.tag)).await?;
    let mut m = Move {
        tag: name.clone(),
        from: now.clone(),
        to: w.original.clone(),
        action: "",
        error: None,
    };
    if now.as_deref() == Some(w.original.as_str()) {
        m.action = "already original";
        return Ok(m);
    }
    if now.as_deref() != Some(w.patched.as_str()) {
        m.action = "moved since the patch; left alone";
        return Ok(m);
    }
    if dry_run {
        m.action = "would restore";
        return Ok(m);
    }
    let doc = reg.manifest_get(&w.source.at_digest(&w.original)).await?;
    copy_image(reg, &w.source, &w.target, &doc).await?;
    reg.manifest_put(&w.target.at_tag(&w.tag), &doc).await?;
    let served = reg.manifest_digest(&w.target.at_tag(&w.tag)).await?;
    if served.as_deref() != Some(w.original.as_str()) {
        return Err(Error::Served(format!(
            "{name} serves {} after the rollback, not {}",
            served.as_deref().unwrap_or("nothing"),
            w.original
        )));
    }
    m.action = "restored";
    Ok(m)
}

/// Tries every tag (one that cannot be restored is reported and the rest go on); returns the
/// moves and how many failed.
pub async fn restore_all(reg: &Registry, todo: &[Wanted], dry_run: bool) -> (Vec<Move>, usize) {
    let mut moves = Vec::new();
    let mut failed = 0usize;
    for w in todo {
        match restore(reg, w, dry_run).await {
            Ok(m) => moves.push(m),
            Err(e) => {
                failed += 1;
                let name = format!("{}:{}", w.target, w.tag);
                tracing::error!("{name}: not restored: {e:#}");
                moves.push(Move {
                    tag: name,
                    from: None,
                    to: w.original.clone(),
                    action: "failed",
                    error: Some(format!("{e:#}")),
                });
            }
        }
    }
    (moves, failed)
}

/// A rollback as text for people: each move with the digests it went between (and why it
/// failed), each provenance artifact kept, or that there was nothing to roll back.
pub fn text(moves: &[Move], kept: &[Kept]) -> Vec<String> {
    let mut out = Vec::new();
    for m in moves {
        let from = m
            .from
            .as_deref()
            .unwrap_or(if m.error.is_some() { "?" } else { "absent" });
        let mut line = format!("{:<24} {}  ({from} -> {})", m.action, m.tag, m.to);
        if let Some(e) = &m.error {
            line.push_str(&format!("\n{:<24} {e}", ""));
        }
        out.push(line);
    }
    for k in kept {
        out.push(format!(
            "{:<24} {} on {} (it describes that image, which stays by digest)",
            "provenance kept", k.provenance, k.subject
        ));
    }
    if moves.is_empty() {
        out.push("nothing to roll back: the map records no patched image".into());
    }
    out
}
