//! One bounded request: who may receive credentials, how long an answer may take, how much of
//! it is read, and how many requests are in flight at once.
//!
//! A registry is not trusted to end what it starts: every body is read chunk by chunk under an
//! idle timeout (no byte for N seconds) and a deadline that grows with the expected size, and
//! is cut at a cap. Credentials go only to the registry's own origin; absolute URLs it names on
//! other hosts (upload `Location`, tag-list `Link`) are called without them.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, AUTHORIZATION, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode, Url};
use tokio::sync::OwnedSemaphorePermit;

use super::{registry_message, retry_after, retryable, Http, RegistryError, Repo};
use crate::registry::auth::Scope;

/// Time and concurrency bounds for registry traffic, set once per run from the command line
/// (or its `RUNNER_PATCH_*` environment variables); see README "Bounds".
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// No byte for this long ends a request.
    pub idle: Duration,
    /// The fixed part of every request's deadline.
    pub base: Duration,
    /// Slowest accepted rate, bytes per second: a request's deadline grows by its size at it.
    pub min_rate: u64,
    /// How long a `docker-credential-*` helper may run before it is killed.
    pub helper: Duration,
    /// Requests in flight at once when the command does not size it from `--jobs`.
    pub max_requests: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            idle: Duration::from_secs(60),
            base: Duration::from_secs(60),
            min_rate: 256 * 1024,
            helper: Duration::from_secs(30),
            max_requests: 16,
        }
    }
}

impl Limits {
    /// The deadline of a request that moves `bytes`: the base plus their time at the min rate.
    pub fn deadline(&self, bytes: u64) -> Duration {
        self.base + Duration::from_secs_f64(bytes as f64 / self.min_rate.max(1) as f64)
    }
}

static LIMITS: OnceLock<Limits> = OnceLock::new();

/// Sets the run's limits (first call wins; later calls are ignored).
pub fn configure(limits: Limits) {
    let _ = LIMITS.set(limits);
}

/// The run's limits, or the defaults when none were configured.
pub fn limits() -> Limits {
    *LIMITS.get_or_init(Limits::default)
}

/// Body caps: what a well-behaved registry never exceeds.
pub const TAGS_PAGE_MAX: u64 = 4 * 1024 * 1024;
pub const TOKEN_MAX: u64 = 1024 * 1024;
/// Error bodies are read only for their message.
const ERROR_BODY_MAX: u64 = 64 * 1024;

/// Why a body read stopped early.
#[derive(Debug)]
pub(crate) enum Cut {
    /// No byte for the idle timeout: not retried (a silent registry rarely comes back soon).
    Idle(Duration),
    /// The request's deadline passed: not retried.
    Deadline(Duration),
    /// The connection broke: worth a retry or a resume.
    Broken(String),
}

impl Cut {
    pub fn retryable(&self) -> bool {
        matches!(self, Cut::Broken(_))
    }
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::Idle(d) => write!(
                f,
                "no byte arrived for {} s (idle timeout, --idle-timeout)",
                d.as_secs()
            ),
            Cut::Deadline(d) => write!(
                f,
                "the answer did not finish within its {:.0} s deadline (--request-timeout plus its size at --min-rate)",
                d.as_secs_f64()
            ),
            Cut::Broken(why) => f.write_str(why),
        }
    }
}

/// Reads the next chunk of a response within the idle timeout and the deadline.
pub(crate) async fn next_chunk(
    resp: &mut reqwest::Response,
    started: Instant,
    deadline: Duration,
) -> Result<Option<Bytes>, Cut> {
    let idle = limits().idle;
    let left = deadline.saturating_sub(started.elapsed());
    let (wait, cut) = if left <= idle {
        (left, Cut::Deadline(deadline))
    } else {
        (idle, Cut::Idle(idle))
    };
    match tokio::time::timeout(wait, resp.chunk()).await {
        Err(_) => Err(cut),
        Ok(Err(e)) => Err(if e.is_timeout() {
            cut
        } else {
            Cut::Broken(transport(&e))
        }),
        Ok(Ok(c)) => Ok(c),
    }
}

/// Reads a whole body of at most `max` bytes within the time bounds; `what` names the cap.
pub(crate) async fn read_capped(
    resp: &mut reqwest::Response,
    started: Instant,
    deadline: Duration,
    max: u64,
    what: &str,
) -> Result<Vec<u8>, String> {
    if let Some(n) = resp.content_length().filter(|n| *n > max) {
        return Err(format!(
            "the answer announces {n} bytes, over the {max} byte limit for {what}"
        ));
    }
    let mut out = Vec::new();
    while let Some(c) = next_chunk(resp, started, deadline)
        .await
        .map_err(|c| c.to_string())?
    {
        if out.len() as u64 + c.len() as u64 > max {
            return Err(format!(
                "the answer is over the {max} byte limit for {what}; stopped reading"
            ));
        }
        out.extend_from_slice(&c);
    }
    Ok(out)
}

/// A transport failure in a few words, with the innermost cause (reqwest's own message repeats
/// the URL, which the caller already names).
pub(crate) fn transport(e: &reqwest::Error) -> String {
    let mut inner: &dyn std::error::Error = e;
    while let Some(s) = inner.source() {
        inner = s;
    }
    let what = if e.is_connect() {
        "cannot connect"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "connection broke while reading"
    } else {
        "request failed"
    };
    let inner = inner.to_string();
    if inner.is_empty() || inner == what {
        what.to_owned()
    } else {
        format!("{what}: {inner}")
    }
}

/// `scheme://host:port` of a URL, with the scheme's default port filled in.
pub(crate) fn origin(url: &str) -> Option<(String, String, u16)> {
    let u = Url::parse(url).ok()?;
    Some((
        u.scheme().to_owned(),
        u.host_str()?.to_ascii_lowercase(),
        u.port_or_known_default()?,
    ))
}

/// A registry's answer, holding its slot among the requests in flight until it is dropped.
pub(crate) struct Answer {
    pub resp: reqwest::Response,
    pub permit: OwnedSemaphorePermit,
    pub started: Instant,
    pub deadline: Duration,
}

impl Answer {
    pub fn status(&self) -> StatusCode {
        self.resp.status()
    }

    pub fn headers(&self) -> &HeaderMap {
        self.resp.headers()
    }

    /// Narrows the deadline once the size of the answer is known.
    pub fn expect(&mut self, bytes: u64) {
        self.deadline = self.deadline.min(limits().deadline(bytes));
    }

    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Cut> {
        next_chunk(&mut self.resp, self.started, self.deadline).await
    }

    /// The whole body, at most `max` bytes.
    pub async fn body(mut self, max: u64, what: &str) -> Result<Vec<u8>, String> {
        read_capped(&mut self.resp, self.started, self.deadline, max, what).await
    }

    /// The registry's error message from the body, best effort and bounded.
    pub async fn error_text(&mut self) -> String {
        let mut out = Vec::new();
        while let Ok(Some(c)) = self.chunk().await {
            out.extend_from_slice(&c);
            if out.len() as u64 >= ERROR_BODY_MAX {
                break;
            }
        }
        registry_message(&out)
    }

    /// `HTTP <status>: <registry message>`, for errors.
    pub async fn failure(&mut self) -> String {
        let s = self.status().as_u16();
        let msg = self.error_text().await;
        if msg.is_empty() {
            format!("HTTP {s}")
        } else {
            format!("HTTP {s}: {msg}")
        }
    }
}

/// What a request is for, in errors and token scopes; `permit` is a slot the caller already
/// holds (a resumed download keeps its own).
pub(crate) struct Call<'a> {
    pub op: &'static str,
    pub what: &'a str,
    pub repo: &'a Repo,
    pub scope: Scope,
    pub permit: Option<OwnedSemaphorePermit>,
    /// Bytes the request moves (either way), for its deadline.
    pub bytes: u64,
}

impl<'a> Call<'a> {
    /// A read: the token needs pull on the repository.
    pub fn pull(op: &'static str, what: &'a str, repo: &'a Repo) -> Self {
        Call {
            op,
            what,
            repo,
            scope: Scope::pull(&repo.repository),
            permit: None,
            bytes: 0,
        }
    }

    /// A write: the token needs pull and push on the repository.
    pub fn push(op: &'static str, what: &'a str, repo: &'a Repo) -> Self {
        Call {
            op,
            what,
            repo,
            scope: Scope::push(&repo.repository),
            permit: None,
            bytes: 0,
        }
    }

    pub fn moving(mut self, bytes: u64) -> Self {
        self.bytes = bytes;
        self
    }

    pub fn holding(mut self, permit: Option<OwnedSemaphorePermit>) -> Self {
        self.permit = permit;
        self
    }
}

/// How a request's body is made for each attempt.
pub(crate) enum Body {
    Empty,
    Bytes(Bytes),
}

impl Http {
    /// The origin (`scheme://host:port`) the registry's API is served from.
    pub(crate) fn origin_of(&self, repo: &Repo) -> String {
        let ep = repo.endpoint();
        let scheme = if self.inner.plain.contains(&ep) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{ep}")
    }

    /// Whether `url` is on the registry's own origin, the only one that gets its credentials.
    pub(crate) fn is_own(&self, repo: &Repo, url: &str) -> bool {
        match (origin(url), origin(&self.origin_of(repo))) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// A slot among the requests in flight.
    pub(crate) async fn slot(&self) -> OwnedSemaphorePermit {
        match self.inner.slots.clone().acquire_owned().await {
            Ok(p) => p,
            // The semaphore is never closed; a closed one would mean no limit is left to keep.
            Err(_) => unreachable!("the request semaphore is never closed"),
        }
    }

    /// Two slots at once, for a transfer that reads from one request while writing another.
    pub(crate) async fn two_slots(&self) -> (OwnedSemaphorePermit, OwnedSemaphorePermit) {
        match self.inner.slots.clone().acquire_many_owned(2).await {
            Ok(mut p) => {
                let one = p
                    .split(1)
                    .unwrap_or_else(|| unreachable!("two permits split"));
                (one, p)
            }
            Err(_) => unreachable!("the request semaphore is never closed"),
        }
    }

    /// Sends one request with authentication and retries, within the run's bounds. Answers
    /// other than those the retry policy or authentication handle are returned to the caller to
    /// judge, with their body unread.
    pub(crate) async fn send(
        &self,
        call: Call<'_>,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Body,
    ) -> Result<Answer, RegistryError> {
        let Call {
            op,
            what,
            repo,
            scope,
            permit,
            bytes,
        } = call;
        let mut permit = match permit {
            Some(p) => p,
            None => self.slot().await,
        };
        let lim = limits();
        let deadline = lim.deadline(bytes.max(match &body {
            Body::Empty => 0,
            Body::Bytes(b) => b.len() as u64,
        }));
        let uploads = matches!(&body, Body::Bytes(_));
        let retry = self.inner.retry;
        let started = Instant::now();
        let ep = repo.endpoint();
        // Credentials (and token requests) only for the registry's own origin.
        let own = self.is_own(repo, url);
        let mut auth_tries = 0;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let authz = if own {
                self.inner
                    .auth
                    .header(&repo.registry, &ep, &scope)
                    .await
                    .map_err(|e| RegistryError::new(op, what, e.0, None))?
            } else {
                None
            };
            let mut req = self
                .inner
                .http
                .request(method.clone(), url)
                .headers(headers.clone())
                // A backstop; the bounded reads give the clearer error first.
                .timeout(deadline + Duration::from_secs(1));
            if let Some(a) = &authz {
                req = req.header(AUTHORIZATION, a);
            }
            req = match &body {
                Body::Empty => req,
                Body::Bytes(b) => req.body(b.clone()),
            };
            let sent_at = Instant::now();
            // Waiting for the status line: the idle timeout, or the deadline while uploading.
            let (wait, cut) = if uploads || deadline <= lim.idle {
                (deadline, Cut::Deadline(deadline))
            } else {
                (lim.idle, Cut::Idle(lim.idle))
            };
            let sent = match tokio::time::timeout(wait, req.send()).await {
                Err(_) => return Err(RegistryError::new(op, what, cut.to_string(), None)),
                Ok(r) => r,
            };
            let (wait, failure) = match sent {
                Ok(resp) => {
                    let status = resp.status();
                    let mut answer = Answer {
                        resp,
                        permit,
                        started: sent_at,
                        deadline,
                    };
                    if status == StatusCode::UNAUTHORIZED
                        || (status == StatusCode::FORBIDDEN
                            && authz.as_deref().is_some_and(|a| a.starts_with("Bearer")))
                    {
                        let challenge = answer
                            .headers()
                            .get(WWW_AUTHENTICATE)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        if own
                            && auth_tries < 2
                            && self
                                .inner
                                .auth
                                .rejected(&ep, &scope, challenge.as_deref(), authz.is_some())
                                .await
                        {
                            auth_tries += 1;
                            permit = answer.permit;
                            continue;
                        }
                        let hint = if !own {
                            "answered by a host other than the registry, which gets no credentials"
                        } else if authz.is_some() {
                            "credentials were rejected"
                        } else {
                            "authentication required and no credentials found"
                        };
                        let msg = answer.error_text().await;
                        let detail = if msg.is_empty() {
                            format!("HTTP {}: {hint}", status.as_u16())
                        } else {
                            format!("HTTP {}: {hint} ({msg})", status.as_u16())
                        };
                        return Err(RegistryError::new(op, what, detail, Some(status.as_u16())));
                    }
                    if !retryable(status) {
                        return Ok(answer);
                    }
                    let wait = retry_after(answer.headers());
                    let detail = answer.failure().await;
                    permit = answer.permit;
                    (
                        wait,
                        RegistryError::new(op, what, detail, Some(status.as_u16())),
                    )
                }
                Err(e) => {
                    // The backstop deadline; a connect timeout is a connection error, retried.
                    if e.is_timeout() && !e.is_connect() {
                        return Err(RegistryError::new(
                            op,
                            what,
                            Cut::Deadline(deadline).to_string(),
                            None,
                        ));
                    }
                    (None, RegistryError::new(op, what, transport(&e), None))
                }
            };
            let wait = wait.unwrap_or_else(|| retry.backoff(attempt));
            if attempt >= retry.attempts || started.elapsed() + wait > retry.budget {
                return Err(failure);
            }
            tracing::warn!(
                "{failure}; retry {attempt}/{} in {:.1}s",
                retry.attempts - 1,
                wait.as_secs_f64()
            );
            tokio::time::sleep(wait).await;
        }
    }
}
