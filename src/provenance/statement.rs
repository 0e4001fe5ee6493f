//! The provenance statement of one patched platform manifest: an in-toto Statement v1 with a
//! SLSA provenance v1 predicate, and the OCI 1.1 artifact that carries it. Every digest in it
//! is one this tool computed or read; it holds no time and no run id, so the same patch of the
//! same image gives the same bytes and a re-run attaches nothing new.

use serde_json::{json, Value};

use crate::digest_map::{ImageRecord, ProvenanceRecord};
use crate::media::{Document, OCI_MANIFEST};
use crate::patch::Outcome;
use crate::plan::{ImagePlan, NewImage, PatchStep, PlatformPlan};
use crate::provenance::error::Error;
use crate::registry::Repo;

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
pub const EMPTY: &[u8] = b"{}";

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

pub(crate) fn hex(digest: &str) -> &str {
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
    pub fn predicate(&self) -> Result<Vec<u8>, Error> {
        let v: Value = serde_json::from_slice(&self.statement)
            .map_err(|e| Error::Invalid(format!("statement of {}: {e}", self.subject.digest)))?;
        serde_json::to_vec_pretty(&v["predicate"])
            .map_err(|e| Error::Invalid(format!("statement of {}: {e}", self.subject.digest)))
    }
}

/// The patches applied to a platform, in order: each with its id, title and definition digest.
fn applied(p: &PlatformPlan) -> Result<Vec<&PatchStep>, Error> {
    let applied: Vec<&PatchStep> = p
        .patches
        .iter()
        .filter(|s| s.outcome == Outcome::Patched)
        .collect();
    if applied.is_empty() {
        return Err(Error::Invalid(format!(
            "{} is patched by no patch",
            p.platform
        )));
    }
    Ok(applied)
}

/// The statement's resolved dependencies (the original manifest, each file's original) and
/// byproducts (each layer, the config, each file written).
fn materials(
    plan: &ImagePlan,
    p: &PlatformPlan,
    new: &NewImage,
    applied: &[&PatchStep],
) -> (Vec<Value>, Vec<Value>) {
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
    // The wheels a patch installed are what the new layer was built from.
    for w in applied.iter().flat_map(|s| &s.installed) {
        let mut dep = json!({
            "name": format!("{}=={}", w.name, w.version),
            "digest": {"sha256": w.sha256},
            "annotations": {"wheel": w.wheel},
        });
        if let Some(u) = &w.url {
            dep["uri"] = Value::String(u.clone());
        }
        deps.push(dep);
    }
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
    (deps, byproducts)
}

/// The in-toto statement of one patched platform.
fn statement(plan: &ImagePlan, p: &PlatformPlan, new: &NewImage) -> Result<Value, Error> {
    let applied = applied(p)?;
    let patches: Vec<Value> = applied
        .iter()
        .map(|s| json!({"id": s.id, "title": s.title, "digest": {"sha256": hex(&s.definition_digest)}}))
        .collect();
    let (deps, byproducts) = materials(plan, p, new, &applied);
    Ok(json!({
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
    }))
}

/// The OCI 1.1 artifact manifest carrying a statement (the empty config, the statement as its
/// one layer, the patched manifest as its subject).
fn artifact_manifest(
    p: &PlatformPlan,
    new: &NewImage,
    statement: &[u8],
    statement_digest: &str,
) -> Document {
    let ids: Vec<&str> = p
        .patches
        .iter()
        .filter(|s| s.outcome == Outcome::Patched)
        .map(|s| s.id.as_str())
        .collect();
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
    Document::from_value(manifest, OCI_MANIFEST)
}

/// Builds the statement and its artifact for every patched platform of a plan. With one
/// patch the statement names one layer and one file; stacked patches name each of theirs.
pub fn build(plan: &ImagePlan) -> Result<Vec<Attachment>, Error> {
    let mut out = Vec::new();
    for p in &plan.platforms {
        let Some(new) = &p.new else { continue };
        let statement = serde_json::to_vec(&statement(plan, p, new)?)
            .map_err(|e| Error::Invalid(format!("statement of {}: {e}", p.platform)))?;
        let statement_digest = crate::digest::sha256(&statement);
        let manifest = artifact_manifest(p, new, &statement, &statement_digest);
        out.push(Attachment {
            platform: p.platform.clone(),
            subject: new.manifest.clone(),
            statement,
            statement_digest,
            manifest,
        });
    }
    Ok(out)
}

/// What attaching one artifact did.
#[derive(Debug, Clone)]
pub struct Attached {
    pub via: &'static str,
    /// False when the artifact was already listed (nothing written).
    pub pushed: bool,
}

/// What the digest map records of an artifact, and of attaching it (`None`: not pushed).
pub fn record_of(a: &Attachment, done: Option<&Attached>) -> ProvenanceRecord {
    ProvenanceRecord {
        digest: a.manifest.digest.clone(),
        media_type: OCI_MANIFEST.to_owned(),
        artifact_type: ARTIFACT_TYPE.to_owned(),
        statement_digest: a.statement_digest.clone(),
        attached_via: done.map(|d| d.via.to_owned()),
        attached: done.is_some_and(|d| d.pushed),
    }
}

/// Adds the provenance artifacts and signatures to a digest map record.
pub fn fill_record(
    rec: &mut ImageRecord,
    attachments: &[Attachment],
    attached: &[Attached],
    signatures: Vec<crate::digest_map::SignatureRecord>,
) {
    for (i, a) in attachments.iter().enumerate() {
        if let Some(p) = rec
            .platforms
            .iter_mut()
            .find(|p| p.patched_digest.as_deref() == Some(a.subject.digest.as_str()))
        {
            p.provenance = Some(record_of(a, attached.get(i)));
            // The artifact is pushed too: its statement, its manifest and the empty config.
            let bytes = a.bytes();
            p.bytes_to_push += bytes;
            rec.bytes_to_push += bytes;
        }
    }
    rec.signatures = signatures;
}

/// Writes each statement as `sha256-<subject hex>.intoto.json`, and its predicate alone as
/// `sha256-<subject hex>.predicate.json` (what `cosign attest --predicate` takes).
pub fn write_statements(dir: &std::path::Path, attachments: &[Attachment]) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::Io(format!(
            "cannot create --provenance-dir {}: {e}",
            dir.display()
        ))
    })?;
    for a in attachments {
        let stem = referrers_tag(&a.subject.digest);
        for (name, bytes) in [
            (format!("{stem}.intoto.json"), a.statement.clone()),
            (format!("{stem}.predicate.json"), a.predicate()?),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, bytes)
                .map_err(|e| Error::Io(format!("cannot write {}: {e}", path.display())))?;
        }
    }
    Ok(())
}
