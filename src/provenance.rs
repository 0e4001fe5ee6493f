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
use crate::media::{Descriptor, Document, OCI_INDEX, OCI_MANIFEST};
use crate::plan::ImagePlan;
use crate::registry::{Registry, Repo};

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
fn purl(repo: &Repo, digest: &str) -> String {
    format!(
        "pkg:docker/{}@{}?repository_url={}",
        repo.repository,
        digest.replace(':', "%3A"),
        repo.registry.replace(':', "%3A")
    )
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
        let mut deps = vec![json!({
            "name": "manifest",
            "uri": purl(&plan.source, &p.original.digest),
            "digest": {"sha256": hex(&p.original.digest)},
            "mediaType": p.original.media_type,
        })];
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

/// What attaching one artifact did.
#[derive(Debug, Clone)]
pub struct Attached {
    pub via: &'static str,
    /// False when the artifact was already listed (nothing written).
    pub pushed: bool,
}

/// The referrers of `digest` in `repo`: from the referrers API where the registry has one, else
/// from the referrers tag schema; descriptors as listed.
pub async fn referrers(reg: &Registry, repo: &Repo, digest: &str) -> Result<(Vec<Value>, bool)> {
    if let Some(index) = reg.referrers_get(repo, digest).await? {
        return Ok((manifests_of(&index), true));
    }
    Ok((
        referrers_index(reg, repo, digest)
            .await?
            .map(|i| manifests_of(&i))
            .unwrap_or_default(),
        false,
    ))
}

fn manifests_of(index: &Document) -> Vec<Value> {
    index
        .json
        .get("manifests")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

async fn referrers_index(reg: &Registry, repo: &Repo, digest: &str) -> Result<Option<Document>> {
    let r = repo.at_tag(&referrers_tag(digest));
    if reg.manifest_digest(&r).await?.is_none() {
        return Ok(None);
    }
    let doc = reg.manifest_get(&r).await?;
    if doc.media_type != OCI_INDEX {
        return Err(anyhow!(
            "{repo}:{} is {}, not the OCI index the referrers tag schema uses; refusing to overwrite it",
            referrers_tag(digest),
            doc.media_type
        ));
    }
    Ok(Some(doc))
}

async fn put_blob(reg: &Registry, repo: &Repo, digest: &str, bytes: &[u8]) -> Result<bool> {
    if reg.blob_exists(repo, digest).await? {
        return Ok(false);
    }
    reg.blob_put(repo, digest, bytes.to_vec()).await?;
    Ok(true)
}

/// Attaches one artifact in `repo` (where its subject is), unless it is listed already.
pub async fn attach(reg: &Registry, repo: &Repo, a: &Attachment) -> Result<Attached> {
    let subject = &a.subject.digest;
    let (listed, api) = referrers(reg, repo, subject).await?;
    let via = if api {
        "referrers-api"
    } else {
        "referrers-tag"
    };
    let present = listed
        .iter()
        .any(|d| d.get("digest").and_then(Value::as_str) == Some(a.manifest.digest.as_str()));
    if present
        && reg
            .manifest_digest(&repo.at_digest(&a.manifest.digest))
            .await?
            .is_some()
    {
        return Ok(Attached { via, pushed: false });
    }
    put_blob(reg, repo, EMPTY_DIGEST, EMPTY).await?;
    put_blob(reg, repo, &a.statement_digest, &a.statement).await?;
    if reg
        .manifest_put_with_subject(repo, &a.manifest, subject)
        .await?
    {
        return Ok(Attached {
            via: "referrers-api",
            pushed: true,
        });
    }
    // No `OCI-Subject` answer: the registry keeps no referrers list, so the tag schema does.
    let tag = referrers_tag(subject);
    let mut index = match referrers_index(reg, repo, subject).await? {
        Some(doc) => doc.json,
        None => json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}),
    };
    let list = index
        .get_mut("manifests")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| anyhow!("{repo}:{tag} has no manifests list"))?;
    if !list
        .iter()
        .any(|d| d.get("digest").and_then(Value::as_str) == Some(a.manifest.digest.as_str()))
    {
        list.push(a.descriptor());
    }
    let doc = Document::from_value(index, OCI_INDEX);
    reg.manifest_put(&repo.at_tag(&tag), &doc).await?;
    Ok(Attached {
        via: "referrers-tag",
        pushed: true,
    })
}

/// Whether a referrer descriptor is a provenance statement of the kind this tool attaches.
fn is_provenance(d: &Value) -> bool {
    d.get("artifactType").and_then(Value::as_str) == Some(ARTIFACT_TYPE)
        && d.get("annotations")
            .and_then(|a| a.get(PREDICATE_ANNOTATION))
            .and_then(Value::as_str)
            == Some(PREDICATE_TYPE)
}

/// Copies the provenance artifacts of `subject` from `source` to `target`, for an already
/// patched image published under another repository: the record describes the same digest, so
/// it goes with it. Artifacts are copied as they are (same digests); returns how many.
pub async fn copy_attached(
    reg: &Registry,
    source: &Repo,
    target: &Repo,
    subject: &Document,
) -> Result<usize> {
    if source == target {
        return Ok(0);
    }
    let mut copied = 0;
    for d in referrers(reg, source, &subject.digest).await?.0 {
        if !is_provenance(&d) {
            continue;
        }
        let desc = Descriptor::from_json(&d, &format!("referrers of {}", subject.digest))
            .map_err(|e| anyhow!(e))?;
        let manifest = reg.manifest_get(&source.at_digest(&desc.digest)).await?;
        let layer = manifest.json["layers"]
            .get(0)
            .ok_or_else(|| anyhow!("provenance {} in {source} has no layer", desc.digest))?;
        let ldesc = Descriptor::from_json(layer, &format!("provenance {} layers[0]", desc.digest))
            .map_err(|e| anyhow!(e))?;
        let statement = reg.blob_get_small(source, &ldesc, 4 * 1024 * 1024).await?;
        let a = Attachment {
            platform: String::new(),
            subject: subject.clone(),
            statement,
            statement_digest: ldesc.digest,
            manifest,
        };
        if attach(reg, target, &a).await?.pushed {
            copied += 1;
        }
    }
    Ok(copied)
}

/// A signature or attestation of the source image: it covers the original digest, not the
/// patched one, and is never moved or copied.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SignatureRecord {
    /// `cosign-signature` (`.sig` tag), `cosign-attestation` (`.att` tag) or `referrer`.
    pub kind: String,
    /// Where it is: a tag (`REPO:sha256-<hex>.sig`) or a digest (`REPO@sha256:...`).
    pub reference: String,
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The digest it signs: an original, which stays in the registry.
    pub covers: String,
    /// The patched digest that replaced it, which it does not cover.
    pub not_covering: Option<String>,
}

/// Finds the signatures and attestations of each `(original, patched)` digest pair in `repo`:
/// cosign's `.sig`/`.att` tags and referrers (API or tag schema).
pub async fn signatures(
    reg: &Registry,
    repo: &Repo,
    digests: &[(String, Option<String>)],
) -> Result<Vec<SignatureRecord>> {
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

/// What `verify` knows of a platform independently of the statement: the file path and the
/// sha256 of the original and patched copies it read.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// The patch that writes `file`: a statement of other patches (stacked in a later run)
    /// does not name it.
    pub by: Option<String>,
    pub file: Option<String>,
    pub original_file: Option<String>,
    pub patched_file: Option<String>,
}

fn find_named<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list.as_array()?
        .iter()
        .find(|r| r.get("name").and_then(Value::as_str) == Some(name))
}

fn sha_of(r: Option<&Value>) -> Option<String> {
    r?.get("digest")?
        .get("sha256")?
        .as_str()
        .map(|h| format!("sha256:{h}"))
}

/// Checks the provenance of one patched platform manifest: an artifact is attached, and its
/// statement agrees with the image. `original` is the digest it must name (from a digest map),
/// else the statement's own is checked against the original manifest it names; `recorded` is
/// the artifact the digest map says was attached. Returns the disagreements, each naming the
/// field.
pub async fn check(
    reg: &Registry,
    repo: &Repo,
    manifest: &Document,
    original: Option<&str>,
    recorded: Option<&str>,
    seen: &Seen,
) -> Result<Checked> {
    let mut problems = Vec::new();
    let mut origins = Vec::new();
    let (listed, _) = referrers(reg, repo, &manifest.digest).await?;
    if let Some(r) = recorded {
        if !listed
            .iter()
            .any(|d| d.get("digest").and_then(Value::as_str) == Some(r))
        {
            problems.push(format!(
                "provenance: the artifact {r} recorded in the digest map is not attached to {}",
                manifest.digest
            ));
        }
    }
    let ours: Vec<&Value> = listed.iter().filter(|d| is_provenance(d)).collect();
    if ours.is_empty() {
        problems.push(format!(
            "provenance: no statement is attached to {} (no {PREDICATE_TYPE} referrer)",
            manifest.digest
        ));
        return Ok(Checked { problems, origins });
    }
    let layers: Vec<Descriptor> = manifest
        .json
        .get("layers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|l| Descriptor::from_json(l, "layer").ok())
        .collect();
    let config = manifest
        .json
        .get("config")
        .and_then(|c| c.get("digest"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    for d in ours {
        let desc = match Descriptor::from_json(d, &format!("referrers of {}", manifest.digest)) {
            Ok(desc) => desc,
            Err(e) => {
                problems.push(format!("provenance: statement missing: {e}"));
                continue;
            }
        };
        let at = format!("provenance {}", desc.digest);
        let art = match reg.manifest_get(&repo.at_digest(&desc.digest)).await {
            Ok(a) => a,
            Err(e) => {
                problems.push(format!("{at}: statement missing: {e}"));
                continue;
            }
        };
        let subject = art.json["subject"]["digest"].as_str().unwrap_or("none");
        if subject != manifest.digest {
            problems.push(format!(
                "{at}: artifact subject digest is {subject}, not the manifest's {}",
                manifest.digest
            ));
        }
        let Some(layer) = art.json["layers"].as_array().and_then(|l| {
            l.iter()
                .find(|x| x.get("mediaType").and_then(Value::as_str) == Some(ARTIFACT_TYPE))
        }) else {
            problems.push(format!(
                "{at}: statement missing (no {ARTIFACT_TYPE} layer)"
            ));
            continue;
        };
        let ldesc =
            Descriptor::from_json(layer, &format!("{at} layers")).map_err(|e| anyhow!(e))?;
        let bytes = match reg.blob_get_small(repo, &ldesc, 4 * 1024 * 1024).await {
            Ok(b) => b,
            Err(e) => {
                problems.push(format!("{at}: statement missing: {e:#}"));
                continue;
            }
        };
        let st: Value = match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("{at}: statement is not JSON: {e}"));
                continue;
            }
        };
        for (field, want) in [("_type", STATEMENT_TYPE), ("predicateType", PREDICATE_TYPE)] {
            if st[field].as_str() != Some(want) {
                problems.push(format!("{at}: {field} is {}, not {want}", st[field]));
            }
        }
        let subj = sha_of(st["subject"].get(0));
        if subj.as_deref() != Some(manifest.digest.as_str()) {
            problems.push(format!(
                "{at}: subject digest {} is not the manifest's {}",
                subj.as_deref().unwrap_or("none"),
                manifest.digest
            ));
        }
        let pred = &st["predicate"];
        let deps = &pred["buildDefinition"]["resolvedDependencies"];
        let params = &pred["buildDefinition"]["externalParameters"];
        origins.push(format!(
            "{}@{} + patch {} (provenance {})",
            params["source"]
                .as_str()
                .and_then(|s| Repo::parse_reference(s).ok())
                .map_or("?".to_owned(), |(r, _)| r.to_string()),
            sha_of(find_named(deps, "manifest"))
                .as_deref()
                .unwrap_or("?"),
            params["patches"][0]["id"].as_str().unwrap_or("?"),
            desc.digest
        ));
        let named_original = sha_of(find_named(deps, "manifest"));
        match (original, named_original.as_deref()) {
            (Some(want), got) if got != Some(want) => problems.push(format!(
                "{at}: original digest {} is not the recorded original {want}",
                got.unwrap_or("none")
            )),
            (None, None) => problems.push(format!("{at}: original digest missing")),
            (None, Some(got)) => {
                if let Some(p) =
                    original_mismatch(reg, &st, got, &layers, named_layers_of(pred)).await?
                {
                    problems.push(format!("{at}: original digest {got}: {p}"));
                }
            }
            _ => {}
        }
        let by = &pred["runDetails"]["byproducts"];
        // The layers the statement names (one per file patch) are the manifest's last ones.
        let named_layers: Vec<String> = by
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b.get("name").and_then(Value::as_str) == Some("layer"))
            .filter_map(|b| sha_of(Some(b)))
            .collect();
        let added: Vec<String> = layers
            .iter()
            .rev()
            .take(named_layers.len())
            .rev()
            .map(|l| l.digest.clone())
            .collect();
        if named_layers != added {
            problems.push(format!(
                "{at}: layer digest {} is not the manifest's last layer {}",
                named_layers.last().map_or("none", String::as_str),
                layers.last().map_or("none", |l| l.digest.as_str())
            ));
        }
        let named_config = sha_of(find_named(by, "config"));
        if named_config != config {
            problems.push(format!(
                "{at}: config digest {} is not the manifest's {}",
                named_config.as_deref().unwrap_or("none"),
                config.as_deref().unwrap_or("none")
            ));
        }
        let stated: Vec<&str> = params["patches"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["id"].as_str())
            .collect();
        let about_file = seen.by.as_deref().is_none_or(|b| stated.contains(&b));
        if let (Some(file), true) = (&seen.file, about_file) {
            for (role, list, want) in [
                ("original file digest", deps, &seen.original_file),
                ("patched file digest", by, &seen.patched_file),
            ] {
                let got = sha_of(find_named(list, file));
                match want {
                    Some(w) if got.as_deref() != Some(w.as_str()) => problems.push(format!(
                        "{at}: {role} of {file} is {}, but the image's is {w}",
                        got.as_deref().unwrap_or("none")
                    )),
                    _ => {}
                }
            }
        }
    }
    Ok(Checked { problems, origins })
}

/// What the provenance check found: disagreements, and per statement where the image came from
/// (`REPO@ORIGINAL + patch ID`), for people reading `verify`.
#[derive(Debug, Clone, Default)]
pub struct Checked {
    pub problems: Vec<String>,
    pub origins: Vec<String>,
}

/// How many layers a predicate says the patches appended.
fn named_layers_of(pred: &Value) -> usize {
    pred["runDetails"]["byproducts"]
        .as_array()
        .map_or(0, |b| b.iter().filter(|x| x["name"] == "layer").count())
}

/// Without a digest map: the original a statement names must exist where it says and be this
/// image without its last layer.
async fn original_mismatch(
    reg: &Registry,
    st: &Value,
    original: &str,
    layers: &[Descriptor],
    added: usize,
) -> Result<Option<String>> {
    let Some(source) = st["predicate"]["buildDefinition"]["externalParameters"]["source"].as_str()
    else {
        return Ok(Some("the statement names no source".into()));
    };
    let Ok((repo, _)) = Repo::parse_reference(source) else {
        return Ok(Some(format!("source {source:?} is not a reference")));
    };
    let doc = match reg.manifest_get(&repo.at_digest(original)).await {
        Ok(d) => d,
        Err(e) => return Ok(Some(format!("not found in {repo}: {e}"))),
    };
    let theirs: Vec<String> = doc.json["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.get("digest").and_then(Value::as_str).map(str::to_owned))
        .collect();
    let ours: Vec<String> = layers.iter().map(|l| l.digest.clone()).collect();
    if theirs.len() + added != ours.len() || ours[..theirs.len()] != theirs[..] {
        return Ok(Some(
            "its layers are not this image's layers without the patch layers".into(),
        ));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::layer::NewLayer;
    use crate::patch::Outcome;
    use crate::plan::{NewImage, PlatformPlan};

    #[test]
    fn empty_descriptor_is_the_digest_of_braces() {
        assert_eq!(crate::digest::sha256(EMPTY), EMPTY_DIGEST);
        assert_eq!(referrers_tag("sha256:ab12"), "sha256-ab12");
    }

    fn manifest(layers: &str) -> Document {
        Document::parse(
            format!(
                r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:{}","size":1}},"layers":[{layers}]}}"#,
                "c".repeat(64)
            )
            .into_bytes(),
            "test manifest",
        )
        .expect("parse")
    }

    fn plan() -> (ImagePlan, crate::patch::PatchSpec) {
        let spec = crate::patches::builtin()
            .expect("builtin")
            .into_iter()
            .next()
            .expect("a patch");
        let repo = Repo::parse("127.0.0.1:5000/gpustack/runner").expect("repo");
        let original = manifest("");
        let new = manifest(&format!(
            r#"{{"mediaType":"x","digest":"sha256:{}","size":3}}"#,
            "b".repeat(64)
        ));
        let layer = NewLayer {
            bytes: vec![1, 2, 3],
            digest: format!("sha256:{}", "b".repeat(64)),
            diff_id: format!("sha256:{}", "d".repeat(64)),
            media_type: crate::media::DOCKER_LAYER_GZIP.into(),
            mtime: 0,
        };
        let platform = PlatformPlan {
            platform: "linux/amd64".into(),
            original: original.clone(),
            outcome: Outcome::Patched,
            reason: String::new(),
            file: Some("/x/multi_connector.py".into()),
            version: None,
            shape: None,
            layers_scanned: 1,
            bytes_scanned: 1,
            new: Some(NewImage {
                layers: vec![layer],
                config: b"{}".to_vec(),
                config_digest: format!("sha256:{}", "e".repeat(64)),
                manifest: new.clone(),
            }),
            patches: vec![crate::plan::PatchStep {
                id: spec.id.clone(),
                title: spec.title.clone(),
                definition_digest: spec.definition_digest.clone(),
                outcome: Outcome::Patched,
                reason: String::new(),
                layer: Some(0),
                files: vec![crate::plan::FileChange {
                    path: "/x/multi_connector.py".into(),
                    before: Some(format!("sha256:{}", "1".repeat(64))),
                    after: Some(format!("sha256:{}", "2".repeat(64))),
                }],
            }],
            recorded_original: None,
        };
        let plan = ImagePlan {
            source: repo.clone(),
            tag: "cuda12.9-vllm0.27.1".into(),
            target: repo,
            target_tag: "cuda12.9-vllm0.27.1".into(),
            original,
            platforms: vec![platform],
            new_top: Some(new),
            dropped: Vec::new(),
            companions: Vec::new(),
            outcome: Outcome::Patched,
            reason: String::new(),
            recorded_original: None,
        };
        (plan, spec)
    }

    #[test]
    fn statement_names_every_digest_and_is_reproducible() {
        let (plan, spec) = plan();
        let a = build(&plan).expect("build");
        let b = build(&plan).expect("build");
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].statement, b[0].statement, "same input, same statement");
        assert_eq!(a[0].manifest.digest, b[0].manifest.digest);
        let new = plan.platforms[0].new.as_ref().expect("new");
        let st: Value = serde_json::from_slice(&a[0].statement).expect("json");
        assert_eq!(
            sha_of(st["subject"].get(0)),
            Some(new.manifest.digest.clone())
        );
        let bd = &st["predicate"]["buildDefinition"];
        let deps = &bd["resolvedDependencies"];
        assert_eq!(
            sha_of(find_named(deps, "manifest")),
            Some(plan.original.digest.clone())
        );
        assert_eq!(
            sha_of(find_named(deps, "/x/multi_connector.py")),
            Some(format!("sha256:{}", "1".repeat(64)))
        );
        assert_eq!(
            sha_of(Some(&bd["externalParameters"]["patches"][0])),
            Some(spec.definition_digest.clone())
        );
        let by = &st["predicate"]["runDetails"]["byproducts"];
        assert_eq!(
            sha_of(find_named(by, "layer")),
            Some(new.layers[0].digest.clone())
        );
        assert_eq!(
            sha_of(find_named(by, "config")),
            Some(new.config_digest.clone())
        );
        assert_eq!(
            sha_of(find_named(by, "/x/multi_connector.py")),
            Some(format!("sha256:{}", "2".repeat(64)))
        );
        let text = String::from_utf8(a[0].statement.clone()).expect("utf8");
        for timey in ["startedOn", "finishedOn", "invocationId"] {
            assert!(!text.contains(timey), "{timey} would make re-runs differ");
        }
        // The artifact: empty config, the statement as its layer, the patched manifest as subject.
        let m = &a[0].manifest.json;
        assert_eq!(m["artifactType"], ARTIFACT_TYPE);
        assert_eq!(m["config"]["digest"], EMPTY_DIGEST);
        assert_eq!(m["layers"][0]["digest"], a[0].statement_digest.as_str());
        assert_eq!(m["layers"][0]["size"], a[0].statement.len());
        assert_eq!(m["subject"]["digest"], new.manifest.digest.as_str());
        assert_eq!(m["subject"]["mediaType"], new.manifest.media_type.as_str());
        let d = a[0].descriptor();
        assert_eq!(d["digest"], a[0].manifest.digest.as_str());
        assert_eq!(d["artifactType"], ARTIFACT_TYPE);
        assert_eq!(d["annotations"], m["annotations"]);
        assert_eq!(
            d["annotations"][ORIGINAL_ANNOTATION],
            plan.original.digest.as_str()
        );
        let pred: Value =
            serde_json::from_slice(&a[0].predicate().expect("predicate")).expect("json");
        assert_eq!(pred, st["predicate"]);
    }

    #[test]
    fn signature_pairs_cover_top_and_patched_children_once() {
        let (plan, _) = plan();
        // A single-manifest tag: the top is the platform, listed once.
        assert_eq!(
            digest_pairs(&plan),
            [(
                plan.original.digest.clone(),
                plan.new_top.as_ref().map(|d| d.digest.clone())
            )]
        );
    }
}
