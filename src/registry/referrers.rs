//! The two registry calls that OCI 1.1 referrers need beyond plain manifests: a manifest PUT
//! that reports whether the registry processed the manifest's `subject` (the `OCI-Subject`
//! response header), and the referrers API (`GET /v2/<name>/referrers/<digest>`). Registries
//! without either (distribution 2.8) are served through the referrers tag schema, which uses
//! only ordinary manifest calls (see `crate::provenance`).

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};

use super::transport::{Body, Call};
use super::{Http, Registry, RegistryError, Repo};
use crate::media::{Document, MANIFEST_MAX_BYTES, OCI_INDEX};

impl Registry {
    /// PUTs a manifest that carries a `subject` by digest; `Ok(true)` when the registry answered
    /// with `OCI-Subject` naming that subject, i.e. it keeps the referrers list itself.
    pub async fn manifest_put_with_subject(
        &self,
        repo: &Repo,
        doc: &Document,
        subject: &str,
    ) -> Result<bool, RegistryError> {
        let subject_seen = self
            .manifest_put_answer(&repo.at_digest(&doc.digest), doc)
            .await?;
        Ok(subject_seen.as_deref() == Some(subject))
    }
}

impl Http {
    /// The referrers of `digest` from the referrers API, or `None` when the registry has no such
    /// API (distribution 2.8 answers 404; the caller then reads the referrers tag schema).
    pub async fn referrers_get(
        &self,
        repo: &Repo,
        digest: &str,
    ) -> Result<Option<Document>, RegistryError> {
        let what = format!("{repo} referrers of {digest}");
        let op = "listing referrers";
        let mut h = HeaderMap::new();
        h.insert(ACCEPT, HeaderValue::from_static(OCI_INDEX));
        let url = format!("{}/referrers/{digest}", self.base(repo));
        let mut resp = self
            .send(
                Call::pull(op, &what, repo).moving(MANIFEST_MAX_BYTES as u64),
                Method::GET,
                &url,
                h,
                Body::Empty,
            )
            .await?;
        let status = resp.status();
        if status == StatusCode::NOT_FOUND || status == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(None);
        }
        if status != StatusCode::OK {
            let detail = resp.failure().await;
            return Err(RegistryError::new(op, &what, detail, Some(status.as_u16())));
        }
        let ct = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if !ct.starts_with(OCI_INDEX) {
            // Some proxies answer unknown routes with 200 and a page: that is not the API.
            tracing::debug!("{what}: answered {ct:?}, not an OCI index; no referrers API");
            return Ok(None);
        }
        if let Some(n) = resp.resp.content_length() {
            resp.expect(n.min(MANIFEST_MAX_BYTES as u64));
        }
        let body = resp
            .body(MANIFEST_MAX_BYTES as u64, "manifests")
            .await
            .map_err(|detail| RegistryError::new(op, &what, detail, None))?;
        Document::parse(body, "the referrers index")
            .map(Some)
            .map_err(|detail| RegistryError::new(op, &what, detail.to_string(), None))
    }
}
