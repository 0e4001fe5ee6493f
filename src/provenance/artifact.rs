//! Attaching statements: the OCI 1.1 artifact, the referrers API or the referrers tag schema,
//! and copying what is attached to a source image along with it.

use serde_json::{json, Value};

use crate::media::{Descriptor, Document, OCI_INDEX};
use crate::provenance::error::Error;
use crate::provenance::statement::{
    referrers_tag, Attached, Attachment, ARTIFACT_TYPE, EMPTY, EMPTY_DIGEST, PREDICATE_ANNOTATION,
    PREDICATE_TYPE,
};
use crate::registry::{Registry, Repo};

type Result<T> = std::result::Result<T, Error>;

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
        return Err(Error::Invalid(format!(
            "{repo}:{} is {}, not the OCI index the referrers tag schema uses; refusing to overwrite it",
            referrers_tag(digest),
            doc.media_type
        )));
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
    // The referrers tag is read, extended and written back: one attach per subject at a time,
    // so tags sharing a patched manifest (and `--jobs`) lose no entry.
    let _writer = reg.tag_writer(&repo.at_tag(&referrers_tag(subject))).await;
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
        .ok_or_else(|| Error::Invalid(format!("{repo}:{tag} has no manifests list")))?;
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
pub(crate) fn is_provenance(d: &Value) -> bool {
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
        let desc = Descriptor::from_json(&d, &format!("referrers of {}", subject.digest))?;
        let manifest = reg.manifest_get(&source.at_digest(&desc.digest)).await?;
        let layer = manifest.json["layers"].get(0).ok_or_else(|| {
            Error::Invalid(format!(
                "provenance {} in {source} has no layer",
                desc.digest
            ))
        })?;
        let ldesc = Descriptor::from_json(layer, &format!("provenance {} layers[0]", desc.digest))?;
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
