//! Blobs going in: uploads (monolithic, then chunked), cross-repository mounts, streamed
//! copies.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::TryStreamExt;
use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use reqwest::{Method, StatusCode};
use tokio::sync::OwnedSemaphorePermit;

use super::auth::Scope;
use super::store::Chunks;
use super::transport::{limits, transport, Answer, Body, Call, Cut};
use super::{retryable, Http, RegistryError, Repo};
use crate::media::Descriptor;

impl Http {
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
            let mut task =
                crate::progress::start(format!("copy {short} to {}", target.registry), desc.size);
            let stream = source(get_slot).inspect_ok(move |c| task.advance(c.len() as u64));
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
