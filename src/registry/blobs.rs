//! Blobs: existence checks, verified and bounded downloads (streamed, resumable), and the streams they give.

use std::time::Instant;

use bytes::Bytes;
use futures_util::Stream;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use tokio::sync::OwnedSemaphorePermit;

use super::transport::{Answer, Body, Call};
use super::{Http, RegistryError, Repo};
use crate::media::{self, Descriptor};

const FETCH: &str = "fetching blob";

impl Http {
    pub async fn blob_exists(&self, repo: &Repo, digest: &str) -> Result<bool, RegistryError> {
        let what = format!("{repo}@{digest}");
        let url = format!("{}/blobs/{digest}", self.base(repo));
        let resp = self
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
            s => Err(RegistryError::new(
                "checking blob",
                &what,
                format!("HTTP {}", s.as_u16()),
                Some(s.as_u16()),
            )),
        }
    }

    /// One GET of a blob from `offset` on; `Ok((answer, skip))` where `skip` bytes must be
    /// dropped when the registry ignored the range. A 404 of a foreign layer says so.
    async fn blob_get_from(
        &self,
        repo: &Repo,
        desc: &Descriptor,
        offset: u64,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(Answer, u64), RegistryError> {
        let what = format!("{repo}@{}", desc.digest);
        let url = format!("{}/blobs/{}", self.base(repo), desc.digest);
        let mut h = HeaderMap::new();
        if offset > 0 {
            if let Ok(v) = format!("bytes={offset}-").parse() {
                h.insert(reqwest::header::RANGE, v);
            }
        }
        let mut resp = self
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
                Err(RegistryError::new(
                    FETCH,
                    &what,
                    format!(
                        "not found (HTTP 404): it is a foreign, non-distributable layer (media type {}{from}), which registries need not hold, and this tool reads layers only from the registry",
                        desc.media_type
                    ),
                    Some(404),
                ))
            }
            s => {
                let detail = resp.failure().await;
                Err(RegistryError::new(FETCH, &what, detail, Some(s.as_u16())))
            }
        }
    }

    /// Streams a blob, verified and bounded: its sha256 and size are checked as the bytes pass,
    /// the stream ends with an error as soon as the registry sends more than the descriptor's
    /// size (never reading past it), and each read is under the idle timeout and the request's
    /// deadline. A connection that breaks mid-blob is resumed with a range request (or re-read
    /// from the start where ranges are not supported), within the retry policy; a stall is not
    /// retried. `permit` is a request slot the caller already holds.
    pub(crate) fn blob_chunks(
        &self,
        repo: &Repo,
        desc: &Descriptor,
        permit: Option<OwnedSemaphorePermit>,
    ) -> impl Stream<Item = Result<Bytes, RegistryError>> + Send + 'static {
        struct State {
            reg: Http,
            repo: Repo,
            desc: Descriptor,
            what: String,
            offset: u64,
            skip: u64,
            body: Option<Answer>,
            permit: Option<OwnedSemaphorePermit>,
            failures: u32,
            /// When the last byte arrived: the retry budget counts time without progress, so a
            /// long download that breaks late still resumes.
            progress: Instant,
            done: bool,
            hasher: sha2::Sha256,
        }
        impl State {
            /// Ends the stream with an error, giving the request slot back at once.
            fn fail(mut self, detail: String) -> Option<(Result<Bytes, RegistryError>, State)> {
                self.done = true;
                self.body = None;
                self.permit = None;
                let e = RegistryError::new(FETCH, &self.what, detail, None);
                Some((Err(e), self))
            }
        }
        let st = State {
            reg: self.clone(),
            repo: repo.clone(),
            desc: desc.clone(),
            what: format!("{repo}@{}", desc.digest),
            offset: 0,
            skip: 0,
            body: None,
            permit,
            failures: 0,
            progress: Instant::now(),
            done: false,
            hasher: sha2::Digest::new(),
        };
        futures_util::stream::unfold(st, |mut st| async move {
            let size = st.desc.size;
            loop {
                if st.done {
                    return None;
                }
                let body = match &mut st.body {
                    Some(b) => b,
                    None => {
                        let permit = st.permit.take();
                        match st
                            .reg
                            .blob_get_from(&st.repo, &st.desc, st.offset, permit)
                            .await
                        {
                            Ok((resp, skip)) => {
                                let left = size - st.offset + skip;
                                if let Some(n) = resp.resp.content_length().filter(|n| *n > left) {
                                    return st.fail(format!("the registry announces {n} bytes, more than the {left} the descriptor leaves to read; refusing to read them"));
                                }
                                st.skip = skip;
                                st.body.insert(resp)
                            }
                            Err(e) => {
                                st.done = true;
                                st.permit = None;
                                return Some((Err(e), st));
                            }
                        }
                    }
                };
                match body.chunk().await {
                    Ok(Some(mut chunk)) => {
                        if st.skip > 0 {
                            let n = (st.skip as usize).min(chunk.len());
                            chunk = chunk.slice(n..);
                            st.skip -= n as u64;
                            if chunk.is_empty() {
                                continue;
                            }
                        }
                        if st.offset + chunk.len() as u64 > size {
                            return st.fail(format!(
                                "the registry sent more than the {size} bytes the descriptor gives; stopped reading"
                            ));
                        }
                        st.offset += chunk.len() as u64;
                        st.progress = Instant::now();
                        sha2::Digest::update(&mut st.hasher, &chunk);
                        return Some((Ok(chunk), st));
                    }
                    Err(cut) if !cut.retryable() => return st.fail(cut.to_string()),
                    Err(cut) => {
                        st.failures += 1;
                        st.permit = st.body.take().map(|a| a.permit);
                        let retry = st.reg.inner.retry;
                        let wait = retry.backoff(st.failures);
                        if st.failures >= retry.attempts
                            || st.progress.elapsed() + wait > retry.budget
                        {
                            let detail = format!(
                                "broken after {} bytes, {} times ({cut})",
                                st.offset, st.failures
                            );
                            return st.fail(detail);
                        }
                        tracing::warn!(
                            "{FETCH} {}: connection broke after {} bytes ({cut}); resuming in {:.1}s",
                            st.what,
                            st.offset,
                            wait.as_secs_f64()
                        );
                        tokio::time::sleep(wait).await;
                    }
                    Ok(None) => {
                        st.permit = st.body.take().map(|a| a.permit);
                        let retry = st.reg.inner.retry;
                        if st.offset < size
                            && st.failures + 1 < retry.attempts
                            && st.progress.elapsed() < retry.budget
                        {
                            // A clean close before the end: resume like a broken connection.
                            st.failures += 1;
                            tracing::warn!(
                                "{FETCH} {}: body ended after {} of {size} bytes; resuming",
                                st.what,
                                st.offset,
                            );
                            continue;
                        }
                        let actual = crate::digest::finish(std::mem::take(&mut st.hasher));
                        if actual != st.desc.digest || st.offset != size {
                            let detail = format!(
                                "digest mismatch: the registry served {} bytes (the manifest says {size}) whose digest is {actual}",
                                st.offset
                            );
                            return st.fail(detail);
                        }
                        // Dropping the state gives the request slot back.
                        return None;
                    }
                }
            }
        })
    }
}
