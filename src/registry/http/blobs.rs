//! Blobs on a registry: existence checks, and one bounded GET of a blob from an offset (the
//! step a download takes, again after a break).

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use tokio::sync::OwnedSemaphorePermit;

use crate::media::{self, Descriptor};
use crate::registry::body::Answer;
use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;
use crate::registry::transport::{Body, Call, Transport};

pub(super) const FETCH: &str = "fetching blob";

pub(super) async fn exists(t: &Transport, repo: &Repo, digest: &str) -> Result<bool, Error> {
    let what = format!("{repo}@{digest}");
    let url = format!("{}/blobs/{digest}", t.base(repo));
    let resp = t
        .send(
            Call::pull("checking blob", &what, repo),
            Method::HEAD,
            &url,
            HeaderMap::new(),
            Body::Empty,
        )
        .await?;
    match resp.status() {
        StatusCode::OK => Ok(true),
        StatusCode::NOT_FOUND => Ok(false),
        s => Err(Error::unexpected("checking blob", &what, s.as_u16())),
    }
}

/// One GET of a blob from `offset` on; `Ok((answer, skip))` where `skip` bytes must be
/// dropped when the registry ignored the range. A 404 of a foreign layer says so.
pub(super) async fn get_from(
    t: &Transport,
    repo: &Repo,
    desc: &Descriptor,
    offset: u64,
    permit: Option<OwnedSemaphorePermit>,
) -> Result<(Answer, u64), Error> {
    let what = format!("{repo}@{}", desc.digest);
    let url = format!("{}/blobs/{}", t.base(repo), desc.digest);
    let mut h = HeaderMap::new();
    if offset > 0 {
        if let Ok(v) = format!("bytes={offset}-").parse() {
            h.insert(reqwest::header::RANGE, v);
        }
    }
    let mut resp = t
        .send(
            Call::pull(FETCH, &what, repo)
                .moving(desc.size.saturating_sub(offset))
                .holding(permit),
            Method::GET,
            &url,
            h,
            Body::Empty,
        )
        .await?;
    match resp.status() {
        StatusCode::OK => Ok((resp, offset)),
        StatusCode::PARTIAL_CONTENT if offset > 0 => Ok((resp, 0)),
        StatusCode::NOT_FOUND if media::is_foreign(desc) => {
            let from = if desc.urls.is_empty() {
                String::new()
            } else {
                format!(
                    "; the image says it is served from {}",
                    desc.urls.join(", ")
                )
            };
            Err(Error::new(
                ErrorKind::NotFound,
                FETCH,
                &what,
                format!(
                    "not found (HTTP 404): it is a foreign, non-distributable layer (media type {}{from}), which registries need not hold, and this tool reads layers only from the registry",
                    desc.media_type
                ),
            )
            .with_status(404))
        }
        _ => Err(resp.fail(FETCH, &what).await),
    }
}
