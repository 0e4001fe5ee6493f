//! Blob uploads of bytes this tool made: an upload session, one monolithic PUT (what every
//! registry supports), then a single chunk plus commit if the registry refused that.

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE, LOCATION};
use reqwest::{Method, StatusCode};

use crate::registry::body::Answer;
use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;
use crate::registry::transport::{Body, Call, Transport};

const UPLOAD: &str = "uploading blob";

/// The `Location` an answer names, resolved against the registry's origin.
pub(super) fn location(t: &Transport, repo: &Repo, answer: &Answer) -> Option<String> {
    answer
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(|l| t.absolute(repo, l))
}

/// An upload session's URL with the digest that commits it.
pub(super) fn with_digest(location: &str, digest: &str) -> String {
    let sep = if location.contains('?') { '&' } else { '?' };
    format!("{location}{sep}digest={digest}")
}

fn octet_stream() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h
}

/// Starts an upload session; returns its absolute URL.
pub(super) async fn start(t: &Transport, repo: &Repo, what: &str) -> Result<String, Error> {
    let url = format!("{}/blobs/uploads/", t.base(repo));
    let mut resp = t
        .send(
            Call::push(UPLOAD, what, repo),
            Method::POST,
            &url,
            HeaderMap::new(),
            Body::Empty,
        )
        .await?;
    if resp.status() != StatusCode::ACCEPTED {
        return Err(resp.fail_at(UPLOAD, what, "starting the upload: ").await);
    }
    let loc = location(t, repo, &resp).ok_or_else(|| {
        Error::new(
            ErrorKind::Protocol,
            UPLOAD,
            what,
            "the registry gave no upload Location",
        )
    })?;
    if !t.is_own(repo, &loc) {
        tracing::debug!("{what}: the upload continues on another host; no credentials go there");
    }
    Ok(loc)
}

/// Abandons an upload session (best effort, bounded: the registry expires it anyway).
pub(super) async fn cancel(t: &Transport, repo: &Repo, location: &str) {
    let _ = t
        .http()
        .delete(location)
        .timeout(t.limits().idle)
        .send()
        .await;
    tracing::debug!("cancelled an upload session in {repo}");
}

/// Uploads a blob this tool made: one monolithic PUT (what every registry supports), then
/// a single chunk plus commit if the registry refused that.
pub(super) async fn put(
    t: &Transport,
    repo: &Repo,
    digest: &str,
    bytes: Vec<u8>,
) -> Result<(), Error> {
    let what = format!("{repo}@{digest}");
    let data = Bytes::from(bytes);
    let loc = start(t, repo, &what).await?;
    let mut resp = t
        .send(
            Call::push(UPLOAD, &what, repo),
            Method::PUT,
            &with_digest(&loc, digest),
            octet_stream(),
            Body::Bytes(data.clone()),
        )
        .await?;
    if resp.status() == StatusCode::CREATED {
        return Ok(());
    }
    let first = resp.failure().await;
    drop(resp);
    cancel(t, repo, &loc).await;
    tracing::warn!("{UPLOAD} {what} in one request failed ({first}); trying a chunked upload");
    put_chunked(t, repo, digest, &what, data).await
}

/// Uploads `data` as one chunk (PATCH), then commits it (PUT with the digest).
async fn put_chunked(
    t: &Transport,
    repo: &Repo,
    digest: &str,
    what: &str,
    data: Bytes,
) -> Result<(), Error> {
    let loc = start(t, repo, what).await?;
    let mut h = octet_stream();
    if let Ok(v) = format!("0-{}", data.len().saturating_sub(1)).parse() {
        h.insert("Content-Range", v);
    }
    let mut resp = t
        .send(
            Call::push(UPLOAD, what, repo),
            Method::PATCH,
            &loc,
            h,
            Body::Bytes(data),
        )
        .await?;
    if resp.status() != StatusCode::ACCEPTED {
        let e = resp.fail_at(UPLOAD, what, "chunk: ").await;
        drop(resp);
        cancel(t, repo, &loc).await;
        return Err(e);
    }
    let loc = location(t, repo, &resp).unwrap_or(loc);
    drop(resp);
    let mut resp = t
        .send(
            Call::push(UPLOAD, what, repo),
            Method::PUT,
            &with_digest(&loc, digest),
            octet_stream(),
            Body::Empty,
        )
        .await?;
    if resp.status() != StatusCode::CREATED {
        return Err(resp.fail_at(UPLOAD, what, "commit: ").await);
    }
    Ok(())
}
