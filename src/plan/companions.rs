//! The per-platform companion tags of a multi-arch tag (`<tag>-linux-amd64`, the runner
//! project's own): found for each platform, and where each should point once it is patched.

use crate::media::Document;
use crate::patch::Outcome;
use crate::plan::types::{Companion, Error, PlatformPlan};
use crate::registry::{Registry, Repo};

/// The companion tags that exist for the platforms of an index.
pub(crate) async fn companions(
    reg: &Registry,
    source: &Repo,
    tag: &str,
    target_tag: &str,
    platforms: &[PlatformPlan],
) -> Result<Vec<Companion>, Error> {
    let mut out = Vec::new();
    for p in platforms {
        let suffix = crate::tags::companion_suffix(&p.platform);
        let source_tag = format!("{tag}-{suffix}");
        let target_companion = format!("{target_tag}-{suffix}");
        let Some(current) = reg.manifest_digest(&source.at_tag(&source_tag)).await? else {
            continue;
        };
        let (original_digest, patched) = destination(p);
        if patched.is_some() {
            crate::tags::check(&target_companion).map_err(|e| Error::Tag(e.to_string()))?;
        }
        out.push(Companion {
            platform: p.platform.clone(),
            source_tag,
            target_tag: target_companion,
            current,
            original_digest,
            patched,
        });
    }
    Ok(out)
}

/// A patched platform moves its companion from the original child to the new one; an already
/// patched one completes a companion a failed or killed run left on the original child (known
/// from the child's own label).
fn destination(p: &PlatformPlan) -> (String, Option<Document>) {
    match (&p.new, p.outcome) {
        (Some(n), _) => (p.original.digest.clone(), Some(n.manifest.clone())),
        (None, Outcome::AlreadyPatched) => (
            p.recorded_original
                .clone()
                .unwrap_or_else(|| p.original.digest.clone()),
            Some(p.original.clone()),
        ),
        _ => (p.original.digest.clone(), None),
    }
}
