//! Tag lists, page by page, following only links on the registry's own origin.

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};

use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;
use crate::registry::transport::{Body, Call, Transport};

/// A page of tags is small; a bound keeps a hostile one from filling memory.
const TAGS_PAGE_MAX: u64 = 4 * 1024 * 1024;
const LIST: &str = "listing tags of";

/// Every tag of a repository, following `Link` pagination (a `Link` to another host is
/// followed without credentials).
pub(super) async fn list(t: &Transport, repo: &Repo) -> Result<Vec<String>, Error> {
    let what = repo.to_string();
    let mut url = format!("{}/tags/list?n=1000", t.base(repo));
    let mut tags = Vec::new();
    for _ in 0..10_000 {
        let (page, next) = page(t, repo, &what, &url).await?;
        tags.extend(page);
        match next {
            Some(n) => {
                let next = t.absolute(repo, &n);
                if !t.is_own(repo, &next) {
                    tracing::debug!("tag list of {repo} continues on another host; following it without credentials");
                }
                url = next;
            }
            None => return Ok(tags),
        }
    }
    Err(Error::new(
        ErrorKind::Protocol,
        LIST,
        &what,
        "more than 10000 pages",
    ))
}

/// One page: its tags, and the `Link` to the next page, if any.
async fn page(
    t: &Transport,
    repo: &Repo,
    what: &str,
    url: &str,
) -> Result<(Vec<String>, Option<String>), Error> {
    let mut resp = t
        .send(
            Call::pull(LIST, what, repo).moving(TAGS_PAGE_MAX),
            Method::GET,
            url,
            HeaderMap::new(),
            Body::Empty,
        )
        .await?;
    if resp.status() != StatusCode::OK {
        return Err(resp.fail(LIST, what).await);
    }
    let next = resp
        .headers()
        .get(reqwest::header::LINK)
        .and_then(|v| v.to_str().ok())
        .and_then(|l| l.split(';').next())
        .map(|l| {
            l.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned()
        });
    let body = resp
        .body(TAGS_PAGE_MAX, "a page of tags")
        .await
        .map_err(|c| c.during(LIST, what))?;
    let v: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|_| Error::new(ErrorKind::Protocol, LIST, what, "the answer is not JSON"))?;
    let tags = v
        .get("tags")
        .and_then(|t| t.as_array())
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    Ok((tags, next))
}
