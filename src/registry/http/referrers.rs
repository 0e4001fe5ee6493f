//! The referrers API (`GET /v2/<name>/referrers/<digest>`), which OCI 1.1 registries serve.
//! Registries without it (distribution 2.8) are served through the referrers tag schema, which
//! uses only ordinary manifest calls (see `crate::provenance`); a manifest PUT reports whether
//! the registry processed a `subject` through its `OCI-Subject` answer header (see
//! `manifests::put`).

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};

use super::manifests::read_body;
use crate::media::{Document, MANIFEST_MAX_BYTES, OCI_INDEX};
use crate::registry::error::Error;
use crate::registry::repo::Repo;
use crate::registry::transport::{Body, Call, Transport};

/// The referrers of `digest` from the referrers API, or `None` when the registry has no such
/// API (distribution 2.8 answers 404; the caller then reads the referrers tag schema).
pub(super) async fn get(
    t: &Transport,
    repo: &Repo,
    digest: &str,
) -> Result<Option<Document>, Error> {
    let what = format!("{repo} referrers of {digest}");
    let op = "listing referrers";
    let mut h = HeaderMap::new();
    h.insert(ACCEPT, HeaderValue::from_static(OCI_INDEX));
    let url = format!("{}/referrers/{digest}", t.base(repo));
    let mut resp = t
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
        return Err(resp.fail(op, &what).await);
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
    let body = read_body(resp, op, &what).await?;
    Document::parse(body, "the referrers index")
        .map(Some)
        .map_err(|e| Error::document(op, &what, e))
}
