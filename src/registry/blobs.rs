//! Blobs: existence checks, verified and bounded downloads (streamed, resumable), uploads,
//! cross-repository mounts and streamed copies.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{Stream, TryStreamExt};
use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use reqwest::{Method, StatusCode};
use tokio::sync::OwnedSemaphorePermit;

use super::auth::Scope;
use super::store::Chunks;
use super::transport::{limits, transport, Answer, Body, Call, Cut};
use super::{retryable, Http, RegistryError, Repo};
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

    /// Starts an upload session; returns its absolute URL.
    async fn upload_start(&self, repo: &Repo, what: &str) -> Result<String, RegistryError> {
        let url = format!("{}/blobs/uploads/", self.base(repo));
        let mut resp = self
            .send(
                Call::push("uploading blob", what, repo),
                Method::POST,
                &url,
                HeaderMap::new(),
                Body::Empty,
            )
            .await?;
        if resp.status() != StatusCode::ACCEPTED {
            let s = resp.status().as_u16();
            let detail = resp.failure().await;
            return Err(RegistryError::new(
                "uploading blob",
                what,
                format!("starting the upload: {detail}"),
                Some(s),
            ));
        }
        let loc = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                RegistryError::new(
                    "uploading blob",
                    what,
                    "the registry gave no upload Location",
                    None,
                )
            })?;
        let loc = self.absolute(repo, loc);
        if !self.is_own(repo, &loc) {
            tracing::debug!(
                "{what}: the upload continues on another host; no credentials go there"
            );
        }
        Ok(loc)
    }

    fn with_digest(location: &str, digest: &str) -> String {
        let sep = if location.contains('?') { '&' } else { '?' };
        format!("{location}{sep}digest={digest}")
    }

    /// Abandons an upload session (best effort, bounded: the registry expires it anyway).
    async fn upload_cancel(&self, repo: &Repo, location: &str) {
        let _ = self
            .inner
            .http
            .delete(location)
            .timeout(limits().idle)
            .send()
            .await;
        tracing::debug!("cancelled an upload session in {repo}");
    }

    /// Uploads a blob this tool made: one monolithic PUT (what every registry supports), then
    /// a single chunk plus commit if the registry refused that.
    pub async fn blob_put(
        &self,
        repo: &Repo,
        digest: &str,
        bytes: Vec<u8>,
    ) -> Result<(), RegistryError> {
        let what = format!("{repo}@{digest}");
        let op = "uploading blob";
        let data = Bytes::from(bytes);
        let octet = || {
            let mut h = HeaderMap::new();
            h.insert(
                CONTENT_TYPE,
                reqwest::header::HeaderValue::from_static("application/octet-stream"),
            );
            h
        };
        let loc = self.upload_start(repo, &what).await?;
        let mut resp = self
            .send(
                Call::push(op, &what, repo),
                Method::PUT,
                &Self::with_digest(&loc, digest),
                octet(),
                Body::Bytes(data.clone()),
            )
            .await?;
        if resp.status() == StatusCode::CREATED {
            return Ok(());
        }
        let first = resp.failure().await;
        drop(resp);
        self.upload_cancel(repo, &loc).await;
        tracing::warn!("{op} {what} in one request failed ({first}); trying a chunked upload");
        let loc = self.upload_start(repo, &what).await?;
        let mut h = octet();
        if let Ok(v) = format!("0-{}", data.len().saturating_sub(1)).parse() {
            h.insert("Content-Range", v);
        }
        let mut resp = self
            .send(
                Call::push(op, &what, repo),
                Method::PATCH,
                &loc,
                h,
                Body::Bytes(data),
            )
            .await?;
        if resp.status() != StatusCode::ACCEPTED {
            let s = resp.status().as_u16();
            let detail = resp.failure().await;
            drop(resp);
            self.upload_cancel(repo, &loc).await;
            return Err(RegistryError::new(
                op,
                &what,
                format!("chunk: {detail}"),
                Some(s),
            ));
        }
        let loc = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(|l| self.absolute(repo, l))
            .unwrap_or(loc);
        drop(resp);
        let mut resp = self
            .send(
                Call::push(op, &what, repo),
                Method::PUT,
                &Self::with_digest(&loc, digest),
                octet(),
                Body::Empty,
            )
            .await?;
        if resp.status() != StatusCode::CREATED {
            let s = resp.status().as_u16();
            let detail = resp.failure().await;
            return Err(RegistryError::new(
                op,
                &what,
                format!("commit: {detail}"),
                Some(s),
            ));
        }
        Ok(())
    }

    /// Cross-repository mount on one registry, with one token holding push on the target and
    /// pull on the source. `true` when mounted (201); `false` when the registry declined (202,
    /// 400, 401, 403, 404), and the caller uploads instead.
    pub async fn blob_mount(&self, target: &Repo, source: &Repo, digest: &str) -> bool {
        let what = format!("{target}@{digest}");
        let url = format!(
            "{}/blobs/uploads/?mount={digest}&from={}",
            self.base(target),
            source.repository
        );
        let call = Call {
            scope: Scope::mount(&target.repository, &source.repository),
            ..Call::push("mounting blob", &what, target)
        };
        match self
            .send(call, Method::POST, &url, HeaderMap::new(), Body::Empty)
            .await
        {
            Ok(resp) if resp.status() == StatusCode::CREATED => true,
            Ok(resp) => {
                let status = resp.status();
                let loc = resp
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .map(|l| self.absolute(target, l));
                drop(resp);
                if let (StatusCode::ACCEPTED, Some(loc)) = (status, loc) {
                    // The registry opened an upload instead of mounting; close it.
                    self.upload_cancel(target, &loc).await;
                }
                tracing::debug!(
                    "mount of {digest} from {source} into {target} declined: HTTP {}",
                    status.as_u16()
                );
                false
            }
            Err(e) => {
                tracing::debug!("mount of {digest} from {source} into {target} declined: {e}");
                false
            }
        }
    }

    /// Copies a blob between repositories or registries as one stream (never whole in memory):
    /// GET from the source into a monolithic PUT on the target, which checks the digest. A
    /// broken transfer is retried whole, within the retry policy. The two requests take their
    /// two slots together, so copies can never hold half of what they need and wait forever.
    pub async fn blob_copy(
        &self,
        source: &Repo,
        target: &Repo,
        desc: &Descriptor,
    ) -> Result<(), RegistryError> {
        let what = format!("{source}@{} to {target}", desc.digest);
        self.blob_send(target, desc, &what, true, |slot| {
            Box::pin(self.blob_chunks(source, desc, slot))
        })
        .await
    }

    /// Uploads a blob from a stream `source` makes (again for each attempt): a registry blob
    /// (`two_slots`: the GET takes the first slot) or a file of an OCI layout (one slot).
    pub(crate) async fn blob_send(
        &self,
        target: &Repo,
        desc: &Descriptor,
        what: &str,
        two_slots: bool,
        source: impl Fn(Option<OwnedSemaphorePermit>) -> Chunks,
    ) -> Result<(), RegistryError> {
        let op = "copying blob";
        let retry = self.inner.retry;
        let deadline = limits().deadline(desc.size);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let loc = self.upload_start(target, what).await?;
            let (get_slot, put_slot) = if two_slots {
                let (get, put) = self.two_slots().await;
                (Some(get), put)
            } else {
                (None, self.slot().await)
            };
            let short = desc.digest.get(7..19).unwrap_or(&desc.digest);
            let bar = crate::report::bar(format!("copy {short} to {}", target.registry), desc.size);
            let counted = bar.clone();
            let stream = source(get_slot).inspect_ok(move |c| counted.inc(c.len() as u64));
            let put_url = Self::with_digest(&loc, &desc.digest);
            let authz = if self.is_own(target, &put_url) {
                self.inner
                    .auth
                    .header(
                        &target.registry,
                        &target.endpoint(),
                        &Scope::push(&target.repository),
                    )
                    .await
                    .map_err(|e| RegistryError::new(op, what, e.0, None))?
            } else {
                None
            };
            let mut req = self
                .inner
                .http
                .put(put_url)
                .header(CONTENT_TYPE, "application/octet-stream")
                .header(CONTENT_LENGTH, desc.size)
                .timeout(deadline + Duration::from_secs(1))
                .body(reqwest::Body::wrap_stream(stream));
            if let Some(a) = authz {
                req = req.header(AUTHORIZATION, a);
            }
            let sent_at = Instant::now();
            let sent = tokio::time::timeout(deadline, req.send()).await;
            bar.finish_and_clear();
            let failure = match sent {
                Err(_) => {
                    return Err(RegistryError::new(
                        op,
                        what,
                        Cut::Deadline(deadline).to_string(),
                        None,
                    ))
                }
                Ok(Ok(resp)) if resp.status() == StatusCode::CREATED => return Ok(()),
                Ok(Ok(resp)) => {
                    let s = resp.status();
                    let mut answer = Answer {
                        resp,
                        permit: put_slot,
                        started: sent_at,
                        deadline,
                    };
                    let msg = answer.failure().await;
                    drop(answer);
                    if !retryable(s) {
                        self.upload_cancel(target, &loc).await;
                        return Err(RegistryError::new(op, what, msg, Some(s.as_u16())));
                    }
                    msg
                }
                Ok(Err(e)) => {
                    drop(put_slot);
                    // A failed read of the source (already retried there) is the cause itself.
                    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
                    while let Some(inner) = src {
                        if let Some(r) = inner.downcast_ref::<RegistryError>() {
                            self.upload_cancel(target, &loc).await;
                            return Err(RegistryError::new(
                                r.op,
                                &r.what,
                                r.detail.clone(),
                                r.status,
                            ));
                        }
                        src = inner.source();
                    }
                    transport(&e)
                }
            };
            self.upload_cancel(target, &loc).await;
            let wait = retry.backoff(attempt);
            // Each attempt is bounded by its deadline; attempts by the retry count.
            if attempt >= retry.attempts {
                return Err(RegistryError::new(op, what, failure, None));
            }
            tracing::warn!(
                "{op} {what}: {failure}; retry {attempt}/{} in {:.1}s",
                retry.attempts - 1,
                wait.as_secs_f64()
            );
            tokio::time::sleep(wait).await;
        }
    }
}
