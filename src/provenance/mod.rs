//! The record a patched image carries at the registry: per patched platform manifest, an in-toto
//! Statement v1 with a SLSA provenance v1 predicate, attached as an OCI 1.1 artifact whose
//! `subject` is that manifest. Where the registry does not process `subject` (no `OCI-Subject`
//! answer, as distribution 2.8), the referrers tag schema (`sha256-<hex>`, an OCI index of
//! referrer descriptors) is kept instead, as the distribution spec says. Also here: finding the
//! source image's own signatures (which cover the original digest, never the patched one) and
//! the `verify` checks of a statement against the image it describes.
//!
//! Every digest in a statement is one this tool computed or read; the statement holds no time
//! and no run id, so the same patch of the same image gives the same bytes and a re-run attaches
//! nothing new.

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::digest_map::ImageRecord;
use crate::media::{Document, OCI_MANIFEST};
use crate::plan::ImagePlan;
use crate::registry::Repo;

mod artifact;
mod checks;
mod signatures;
#[cfg(test)]
mod tests;

pub use artifact::{attach, copy_attached, referrers, Attached};
pub use checks::{check, Checked, Seen};
pub use signatures::{digest_pairs, signatures, SignatureRecord};
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";
/// The artifact's `artifactType` and its one layer's media type: an in-toto statement, as
/// buildx and the in-toto attestation framework name it.
pub const ARTIFACT_TYPE: &str = "application/vnd.in-toto+json";
/// The annotation buildx and cosign put beside an in-toto layer.
pub const PREDICATE_ANNOTATION: &str = "in-toto.io/predicate-type";
/// Names the digest the patched subject was made from, so a referrers listing shows it (the
/// same name as the patched config's label).
pub const ORIGINAL_ANNOTATION: &str = crate::rewrite::ORIGINAL_LABEL;
/// What a run of this tool does, as the statement's `buildType` (described in the README).
pub const BUILD_TYPE: &str = "urn:runner-patch:append-layer:v1";
/// The OCI empty descriptor's content (`{}`), used as an artifact's config.
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
pub const EMPTY_DIGEST: &str =
    "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
const EMPTY: &[u8] = b"{}";

/// The builder: this tool and its version (a package URL names both without a location).
pub fn builder_id() -> String {
    format!("pkg:cargo/runner-patch@{}", env!("CARGO_PKG_VERSION"))
}

/// A package URL for an image by digest (`pkg:docker/gpustack/runner@sha256%3A...?repository_url=docker.io`).
fn purl(repo: &Repo, digest: &str) -> Option<String> {
    // A layout directory has no package URL type; its statement names the digest only.
    if repo.layout_path().is_some() {
        return None;
    }
    Some(format!(
        "pkg:docker/{}@{}?repository_url={}",
        repo.repository,
        digest.replace(':', "%3A"),
        repo.registry.replace(':', "%3A")
    ))
}

fn hex(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

/// The tag under which the referrers tag schema lists the referrers of `digest`.
pub fn referrers_tag(digest: &str) -> String {
    format!("sha256-{}", hex(digest))
}

/// One provenance artifact for one patched platform manifest, ready to push.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub platform: String,
    /// The patched platform manifest the statement is about.
    pub subject: Document,
    pub statement: Vec<u8>,
    pub statement_digest: String,
    /// The OCI 1.1 artifact manifest (empty config, the statement as its one layer).
    pub manifest: Document,
}

impl Attachment {
    /// The descriptor the referrers tag schema lists for this artifact.
    pub fn descriptor(&self) -> Value {
        json!({
            "mediaType": OCI_MANIFEST,
            "digest": self.manifest.digest,
            "size": self.manifest.bytes.len(),
            "artifactType": ARTIFACT_TYPE,
            "annotations": self.manifest.json["annotations"].clone(),
        })
    }

    /// Bytes of the blobs and manifest the artifact needs (the referrers index aside).
    pub fn bytes(&self) -> u64 {
        (self.statement.len() + self.manifest.bytes.len() + EMPTY.len()) as u64
    }

    /// The predicate alone, as `cosign attest --predicate` takes it.
    pub fn predicate(&self) -> Result<Vec<u8>> {
        let v: Value = serde_json::from_slice(&self.statement)?;
        Ok(serde_json::to_vec_pretty(&v["predicate"])?)
    }
}

/// Builds the statement and its artifact for every patched platform of a plan. With one
/// patch the statement names one layer and one file; stacked patches name each of theirs.
pub fn build(plan: &ImagePlan) -> Result<Vec<Attachment>> {
    let mut out = Vec::new();
    for p in &plan.platforms {
        let Some(new) = &p.new else { continue };
        let applied: Vec<&crate::plan::PatchStep> = p
            .patches
            .iter()
            .filter(|s| s.outcome == crate::patch::Outcome::Patched)
            .collect();
        if applied.is_empty() {
            return Err(anyhow!("{} is patched by no patch", p.platform));
        }
        let patches: Vec<Value> = applied
            .iter()
            .map(|s| json!({"id": s.id, "title": s.title, "digest": {"sha256": hex(&s.definition_digest)}}))
            .collect();
        let mut manifest_dep = json!({
            "name": "manifest",
            "digest": {"sha256": hex(&p.original.digest)},
            "mediaType": p.original.media_type,
        });
        if let Some(uri) = purl(&plan.source, &p.original.digest) {
            manifest_dep["uri"] = Value::String(uri);
        }
        let mut deps = vec![manifest_dep];
        let mut byproducts = Vec::new();
        for (i, layer) in new.layers.iter().enumerate() {
            let mut annotations = json!({"diff_id": layer.diff_id});
            if new.layers.len() > 1 {
                if let Some(s) = applied.iter().find(|s| s.layer == Some(i)) {
                    annotations["patch"] = Value::from(s.id.clone());
                }
            }
            byproducts.push(json!({
                "name": "layer",
                "digest": {"sha256": hex(&layer.digest)},
                "mediaType": layer.media_type,
                "annotations": annotations,
            }));
        }
        byproducts.push(json!({"name": "config", "digest": {"sha256": hex(&new.config_digest)}}));
        for f in applied.iter().flat_map(|s| &s.files) {
            if let Some(before) = &f.before {
                if !deps.iter().any(|d| d["name"] == f.path.as_str()) {
                    deps.push(json!({"name": f.path, "digest": {"sha256": hex(before)}}));
                }
            }
            if let Some(after) = &f.after {
                byproducts.retain(|b| b["name"] != f.path.as_str());
                byproducts.push(json!({"name": f.path, "digest": {"sha256": hex(after)}}));
            }
        }
        let ids: Vec<&str> = applied.iter().map(|s| s.id.as_str()).collect();
        let statement = json!({
            "_type": STATEMENT_TYPE,
            "subject": [{
                "name": plan.target.to_string(),
                "digest": {"sha256": hex(&new.manifest.digest)},
                "mediaType": new.manifest.media_type,
                "annotations": {"platform": p.platform, "tag": plan.target_tag},
            }],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "buildDefinition": {
                    "buildType": BUILD_TYPE,
                    "externalParameters": {
                        "source": format!("{}:{}", plan.source, plan.tag),
                        "target": format!("{}:{}", plan.target, plan.target_tag),
                        "platform": p.platform,
                        "patches": patches,
                    },
                    "resolvedDependencies": deps,
                },
                "runDetails": {
                    "builder": {
                        "id": builder_id(),
                        "version": {"runner-patch": env!("CARGO_PKG_VERSION")},
                    },
                    "byproducts": byproducts,
                },
            },
        });
        let statement = serde_json::to_vec(&statement)?;
        let statement_digest = crate::digest::sha256(&statement);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": ARTIFACT_TYPE,
            "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": EMPTY.len(), "data": "e30="},
            "layers": [{
                "mediaType": ARTIFACT_TYPE,
                "digest": statement_digest,
                "size": statement.len(),
                "annotations": {PREDICATE_ANNOTATION: PREDICATE_TYPE},
            }],
            "subject": {
                "mediaType": new.manifest.media_type,
                "digest": new.manifest.digest,
                "size": new.manifest.bytes.len(),
            },
            "annotations": {
                PREDICATE_ANNOTATION: PREDICATE_TYPE,
                crate::rewrite::PATCH_LABEL: ids.join(","),
                ORIGINAL_ANNOTATION: p.original.digest,
            },
        });
        out.push(Attachment {
            platform: p.platform.clone(),
            subject: new.manifest.clone(),
            statement,
            statement_digest,
            manifest: Document::from_value(manifest, OCI_MANIFEST),
        });
    }
    Ok(out)
}

/// What the digest map records of a platform's provenance artifact.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProvenanceRecord {
    /// The artifact manifest's digest.
    pub digest: String,
    pub media_type: String,
    pub artifact_type: String,
    /// The statement blob (its one layer).
    pub statement_digest: String,
    /// `referrers-api` when the registry keeps the referrers list, `referrers-tag` when this
    /// tool keeps the `sha256-<hex>` index; null when not pushed (a dry run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached_via: Option<String>,
    /// False when the artifact was already there (a re-run).
    #[serde(default)]
    pub attached: bool,
}

impl ProvenanceRecord {
    pub fn of(a: &Attachment, done: Option<&Attached>) -> Self {
        ProvenanceRecord {
            digest: a.manifest.digest.clone(),
            media_type: OCI_MANIFEST.to_owned(),
            artifact_type: ARTIFACT_TYPE.to_owned(),
            statement_digest: a.statement_digest.clone(),
            attached_via: done.map(|d| d.via.to_owned()),
            attached: done.is_some_and(|d| d.pushed),
        }
    }
}

/// Adds the provenance artifacts and signatures to a digest map record.
pub fn fill_record(
    rec: &mut ImageRecord,
    attachments: &[Attachment],
    attached: &[Attached],
    signatures: Vec<SignatureRecord>,
) {
    for (i, a) in attachments.iter().enumerate() {
        if let Some(p) = rec
            .platforms
            .iter_mut()
            .find(|p| p.patched_digest.as_deref() == Some(a.subject.digest.as_str()))
        {
            p.provenance = Some(ProvenanceRecord::of(a, attached.get(i)));
            // The artifact is pushed too: its statement, its manifest and the empty config.
            let bytes = a.bytes();
            p.bytes_to_push += bytes;
            rec.bytes_to_push += bytes;
        }
    }
    rec.signatures = signatures;
}

/// Summary lines for an image's provenance and signatures.
pub fn summary_lines(rec: &ImageRecord) -> String {
    let mut out = String::new();
    for p in &rec.platforms {
        if let Some(prov) = &p.provenance {
            let state = match (&prov.attached_via, prov.attached) {
                (None, _) => "would attach".to_owned(),
                (Some(via), true) => format!("attached ({via})"),
                (Some(via), false) => format!("already attached ({via})"),
            };
            out.push_str(&format!(
                "\n  {:<16} provenance       {state} {}",
                p.platform, prov.digest
            ));
        }
    }
    for s in &rec.signatures {
        out.push_str(&format!(
            "\n  {:<16} {} {} covers the original {}, not the patched {} (not moved)",
            "signature",
            s.kind,
            s.reference,
            s.covers,
            s.not_covering.as_deref().unwrap_or("image")
        ));
    }
    out
}

/// Writes each statement as `sha256-<subject hex>.intoto.json`, and its predicate alone as
/// `sha256-<subject hex>.predicate.json` (what `cosign attest --predicate` takes).
pub fn write_statements(dir: &std::path::Path, attachments: &[Attachment]) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow!("cannot create --provenance-dir {}: {e}", dir.display()))?;
    for a in attachments {
        let stem = referrers_tag(&a.subject.digest);
        for (name, bytes) in [
            (format!("{stem}.intoto.json"), a.statement.clone()),
            (format!("{stem}.predicate.json"), a.predicate()?),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, bytes)
                .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
        }
    }
    Ok(())
}
