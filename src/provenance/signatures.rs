//! The source image's own signatures (cosign tags, referrers): reported, never moved.

use serde_json::Value;

use crate::digest_map::SignatureRecord;
use crate::media::Descriptor;
use crate::plan::ImagePlan;
use crate::provenance::artifact::referrers;
use crate::provenance::error::Error;
use crate::provenance::statement::referrers_tag;
use crate::registry::{Registry, Repo};

/// Finds the signatures and attestations of each `(original, patched)` digest pair in `repo`:
/// cosign's `.sig`/`.att` tags and referrers (API or tag schema).
pub async fn signatures(
    reg: &Registry,
    repo: &Repo,
    digests: &[(String, Option<String>)],
) -> Result<Vec<SignatureRecord>, Error> {
    let mut out = Vec::new();
    for (original, patched) in digests {
        for (suffix, kind) in [("sig", "cosign-signature"), ("att", "cosign-attestation")] {
            let tag = format!("{}.{suffix}", referrers_tag(original));
            if let Some(d) = reg.manifest_digest(&repo.at_tag(&tag)).await? {
                out.push(SignatureRecord {
                    kind: kind.into(),
                    reference: format!("{repo}:{tag}"),
                    digest: d,
                    artifact_type: None,
                    covers: original.clone(),
                    not_covering: patched.clone(),
                });
            }
        }
        for d in referrers(reg, repo, original).await?.0 {
            let Ok(desc) = Descriptor::from_json(&d, &format!("referrers of {original}")) else {
                continue;
            };
            out.push(SignatureRecord {
                kind: "referrer".into(),
                reference: format!("{repo}@{}", desc.digest),
                digest: desc.digest,
                artifact_type: d
                    .get("artifactType")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                covers: original.clone(),
                not_covering: patched.clone(),
            });
        }
    }
    Ok(out)
}

/// The `(original, patched)` digests of an image whose signatures matter: the tag's top
/// document and each patched platform manifest.
pub fn digest_pairs(plan: &ImagePlan) -> Vec<(String, Option<String>)> {
    let mut out = vec![(
        plan.original.digest.clone(),
        plan.new_top.as_ref().map(|d| d.digest.clone()),
    )];
    for p in &plan.platforms {
        if let Some(n) = &p.new {
            if !out.iter().any(|(o, _)| *o == p.original.digest) {
                out.push((p.original.digest.clone(), Some(n.manifest.digest.clone())));
            }
        }
    }
    out
}
