//! Blobs that come from elsewhere: cross-repository mounts, and uploads streamed from another
//! repository, registry or layout, retried whole, never held whole in memory.

use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use tokio::sync::OwnedSemaphorePermit;

use super::download;
use super::uploads::{cancel, location, start, with_digest};
use crate::media::Descriptor;
use crate::registry::auth::Scope;
use crate::registry::body::{describe, Cut};
use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;
use crate::registry::store::Chunks;
use crate::registry::transport::{pause, retryable, Body, Call, Transport};

const COPY: &str = "copying blob";

/// Cross-repository mount on one registry, with one token holding push on the target and
/// pull on the source. `true` when mounted (201); `false` when the registry declined (202,
/// 400, 401, 403, 404), and the caller uploads instead.
pub(super) async fn mount(t: &Transport, target: &Repo, source: &Repo, digest: &str) -> bool {
    let what = format!("{target}@{digest}");
    let url = format!(
        "{}/blobs/uploads/?mount={digest}&from={}",
        t.base(target),
        source.repository
    );
    let call = Call::mount("mounting blob", &what, target, source);
    match t
        .send(call, Method::POST, &url, HeaderMap::new(), Body::Empty)
        .await
    {
        Ok(resp) if resp.status() == StatusCode::CREATED => true,
        Ok(resp) => {
            let status = resp.status();
            let loc = location(t, target, &resp);
            drop(resp);
            if let (StatusCode::ACCEPTED, Some(loc)) = (status, loc) {
                // The registry opened an upload instead of mounting; close it.
                cancel(t, target, &loc).await;
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
pub(super) async fn copy(
    t: &Transport,
    source: &Repo,
    target: &Repo,
    desc: &Descriptor,
) -> Result<(), Error> {
    let what = format!("{source}@{} to {target}", desc.digest);
    send(t, target, desc, &what, true, |slot| {
        Box::pin(download::chunks(t, source, desc, slot))
    })
    .await
}

/// Uploads a blob from a stream `source` makes (again for each attempt): a registry blob
/// (`two_slots`: the GET takes the first slot) or a file of an OCI layout (one slot).
pub(super) async fn send(
    t: &Transport,
    target: &Repo,
    desc: &Descriptor,
    what: &str,
    two_slots: bool,
    source: impl Fn(Option<OwnedSemaphorePermit>) -> Chunks,
) -> Result<(), Error> {
    let retry = t.retry();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let loc = start(t, target, what).await?;
        let (get_slot, put_slot) = if two_slots {
            let (get, put) = t.two_slots().await;
            (Some(get), put)
        } else {
            (None, t.slot().await)
        };
        let failure =
            match put_stream(t, target, desc, what, &loc, source(get_slot), put_slot).await {
                Ok(()) => return Ok(()),
                Err(Attempt::Stopped(e)) => return Err(e),
                Err(Attempt::Refused(e)) => {
                    cancel(t, target, &loc).await;
                    return Err(e);
                }
                Err(Attempt::Failed(e)) => e,
            };
        cancel(t, target, &loc).await;
        // Each attempt is bounded by its deadline; attempts by the retry count.
        pause(&retry, attempt, None, None, failure).await?;
    }
}

/// Why an attempt of a streamed upload failed.
enum Attempt {
    /// Worth another attempt (the session is cancelled first).
    Failed(Error),
    /// Not worth another attempt; the session is cancelled.
    Refused(Error),
    /// Not worth another attempt, and no time left to cancel the session: the registry
    /// expires it.
    Stopped(Error),
}

/// One streamed PUT of `stream` into the upload session at `loc`, within the deadline of the
/// blob's size.
async fn put_stream(
    t: &Transport,
    target: &Repo,
    desc: &Descriptor,
    what: &str,
    loc: &str,
    stream: Chunks,
    put_slot: OwnedSemaphorePermit,
) -> Result<(), Attempt> {
    let deadline = t.limits().deadline(desc.size);
    let short = desc.digest.get(7..19).unwrap_or(&desc.digest);
    let mut task =
        crate::progress::start(format!("copy {short} to {}", target.registry), desc.size);
    let stream = stream.inspect_ok(move |c| task.advance(c.len() as u64));
    let put_url = with_digest(loc, &desc.digest);
    let authz = t
        .authorization(target, &put_url, &Scope::push(&target.repository))
        .await
        .map_err(|c| Attempt::Stopped(c.during(COPY, what)))?;
    let mut req = t
        .http()
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
    match sent {
        Err(_) => Err(Attempt::Stopped(Cut::Deadline(deadline).during(COPY, what))),
        Ok(Ok(resp)) if resp.status() == StatusCode::CREATED => Ok(()),
        Ok(Ok(resp)) => {
            let s = resp.status();
            let mut answer = t.answer(resp, put_slot, sent_at, deadline);
            let e = answer.fail(COPY, what).await;
            drop(answer);
            Err(if retryable(s) {
                Attempt::Failed(e)
            } else {
                Attempt::Refused(e)
            })
        }
        Ok(Err(e)) => {
            drop(put_slot);
            // A failed read of the source (already retried there) is the cause itself.
            let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(inner) = src {
                if let Some(r) = inner.downcast_ref::<Error>() {
                    return Err(Attempt::Refused(r.clone()));
                }
                src = inner.source();
            }
            Err(Attempt::Failed(Error::new(
                ErrorKind::Transport,
                COPY,
                what,
                describe(&e),
            )))
        }
    }
}
