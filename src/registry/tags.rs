//! Tag lists, page by page, following only links on the registry's own origin.

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};

use super::transport::{Body, Call, TAGS_PAGE_MAX};
use super::*;

impl Http {
    /// Every tag of a repository, following `Link` pagination (a `Link` to another host is
    /// followed without credentials).
    pub async fn tags_list(&self, repo: &Repo) -> Result<Vec<String>, RegistryError> {
        let what = repo.to_string();
        let op = "listing tags of";
        let mut url = format!("{}/tags/list?n=1000", self.base(repo));
        let mut tags = Vec::new();
        for _ in 0..10_000 {
            let mut resp = self
                .send(
                    Call::pull(op, &what, repo).moving(TAGS_PAGE_MAX),
                    Method::GET,
                    &url,
                    HeaderMap::new(),
                    Body::Empty,
                )
                .await?;
            let status = resp.status();
            if status != StatusCode::OK {
                let detail = resp.failure().await;
                return Err(RegistryError::new(op, &what, detail, Some(status.as_u16())));
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
                .map_err(|detail| RegistryError::new(op, &what, detail, None))?;
            let v: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|_| RegistryError::new(op, &what, "the answer is not JSON", None))?;
            tags.extend(
                v.get("tags")
                    .and_then(|t| t.as_array())
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.as_str().map(str::to_owned)),
            );
            match next {
                Some(n) => {
                    let next = self.absolute(repo, &n);
                    if !self.is_own(repo, &next) {
                        tracing::debug!("tag list of {repo} continues on another host; following it without credentials");
                    }
                    url = next;
                }
                None => return Ok(tags),
            }
        }
        Err(RegistryError::new(op, &what, "more than 10000 pages", None))
    }
}
