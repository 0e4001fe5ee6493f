//! One bounded, authenticated request at a time, for the operations above: who may receive
//! credentials, where a URL the registry names leads, and how many requests are in flight.
//!
//! Credentials go only to the registry's own origin; absolute URLs it names on other hosts
//! (upload `Location`, tag-list `Link`) are called without them. Sending (authorize, then
//! retry) is in `send`; what a request is for, in `call`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Url;
use tokio::sync::OwnedSemaphorePermit;

mod call;
mod retry;
mod send;

pub(crate) use call::{Body, Call};
pub(crate) use retry::{pause, retryable};

use super::auth::{Auth, Scope};
use super::body::{describe, Answer, Window};
use super::error::{Cause, Error, ErrorKind};
use super::repo::Repo;
use super::settings::{Limits, Ranges, Retry, Settings};

struct Inner {
    http: reqwest::Client,
    auth: Auth,
    plain: HashSet<String>,
    settings: Settings,
    /// Requests in flight at once, across every task of the run.
    slots: Arc<tokio::sync::Semaphore>,
    /// Ranges of layers read or held at once, across every task of the run.
    window: Arc<tokio::sync::Semaphore>,
}

/// One client for a run: connection pool, token cache, credentials, the run's bounds and the
/// bound on requests in flight. Clones share all of it.
#[derive(Clone)]
pub(crate) struct Transport {
    inner: Arc<Inner>,
}

impl Transport {
    /// A client for the given repositories: loopback ones over plain HTTP, others over TLS; at
    /// most `settings.max_requests` (at least two) requests in flight, so that an index with
    /// thousands of children never opens thousands of connections.
    pub fn new(repos: &[&Repo], settings: Settings) -> Result<Self, Error> {
        let plain = repos
            .iter()
            .filter(|r| r.is_loopback())
            .map(|r| r.endpoint())
            .collect();
        let max_requests = settings.max_requests.max(2);
        let http = reqwest::Client::builder()
            .user_agent(concat!("runner-patch/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(settings.limits.idle)
            // Backstop only: the bounded reads fail first with a clearer message.
            .read_timeout(settings.limits.idle + Duration::from_secs(1))
            // Idle connections beyond the requests in flight are closed, not pooled.
            .pool_max_idle_per_host(max_requests)
            .build()
            // Without a CA bundle the TLS set-up fails; say so instead of panicking later.
            .map_err(|e| {
                Error::new(
                    ErrorKind::Transport,
                    "setting up",
                    "the HTTPS client",
                    format!(
                        "{}; TLS needs the system's CA certificates (the ca-certificates package)",
                        describe(&e)
                    ),
                )
            })?;
        let auth = Auth::new(http.clone(), settings.limits);
        Ok(Transport {
            inner: Arc::new(Inner {
                http,
                auth,
                plain,
                settings,
                slots: Arc::new(tokio::sync::Semaphore::new(max_requests)),
                window: Arc::new(tokio::sync::Semaphore::new(settings.ranges.parallel.max(1))),
            }),
        })
    }

    pub fn limits(&self) -> Limits {
        self.inner.settings.limits
    }

    pub fn retry(&self) -> Retry {
        self.inner.settings.retry
    }

    pub fn ranges(&self) -> Ranges {
        self.inner.settings.ranges
    }

    /// A place among the ranges read or held at once (the window of every layer read in
    /// ranges); it bounds their memory and their connections together.
    pub async fn window_place(&self) -> OwnedSemaphorePermit {
        match self.inner.window.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => unreachable!("the range window semaphore is never closed"),
        }
    }

    /// The HTTP client itself, for a request that streams its body (`send` replays bodies).
    pub fn http(&self) -> &reqwest::Client {
        &self.inner.http
    }

    /// The origin (`scheme://host:port`) the registry's API is served from.
    pub fn origin_of(&self, repo: &Repo) -> String {
        let ep = repo.endpoint();
        let scheme = if self.inner.plain.contains(&ep) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{ep}")
    }

    /// The base URL of a repository's API (`<origin>/v2/<name>`).
    pub fn base(&self, repo: &Repo) -> String {
        format!("{}/v2/{}", self.origin_of(repo), repo.repository)
    }

    /// Resolves a URL the registry named (upload `Location`, tag-list `Link`: absolute,
    /// scheme-relative or a path) against the registry's origin, as a browser would.
    pub fn absolute(&self, repo: &Repo, location: &str) -> String {
        let base = format!("{}/", self.origin_of(repo));
        match Url::parse(&base).and_then(|b| b.join(location.trim())) {
            Ok(u) => u.to_string(),
            Err(_) => format!("{}{location}", self.origin_of(repo)),
        }
    }

    /// Whether `url` is on the registry's own origin, the only one that gets its credentials.
    pub fn is_own(&self, repo: &Repo, url: &str) -> bool {
        match (origin(url), origin(&self.origin_of(repo))) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// The `Authorization` header for a request to `url` with `scope`: none for a URL off the
    /// registry's origin, or before the registry asked for one.
    pub async fn authorization(
        &self,
        repo: &Repo,
        url: &str,
        scope: &Scope,
    ) -> Result<Option<String>, Cause> {
        if !self.is_own(repo, url) {
            return Ok(None);
        }
        self.inner
            .auth
            .header(&repo.registry, &repo.endpoint(), scope)
            .await
    }

    /// An answer that arrived for a request sent at `started` with `deadline`, holding `permit`.
    pub fn answer(
        &self,
        resp: reqwest::Response,
        permit: OwnedSemaphorePermit,
        started: Instant,
        deadline: Duration,
    ) -> Answer {
        let limits = self.limits();
        Answer {
            resp,
            permit,
            window: Window {
                started,
                deadline,
                idle: limits.idle,
            },
            limits,
        }
    }

    /// A slot among the requests in flight.
    pub async fn slot(&self) -> OwnedSemaphorePermit {
        match self.inner.slots.clone().acquire_owned().await {
            Ok(p) => p,
            // The semaphore is never closed; a closed one would mean no limit is left to keep.
            Err(_) => unreachable!("the request semaphore is never closed"),
        }
    }

    /// Two slots at once, for a transfer that reads from one request while writing another.
    pub async fn two_slots(&self) -> (OwnedSemaphorePermit, OwnedSemaphorePermit) {
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
}

/// `scheme://host:port` of a URL, with the scheme's default port filled in.
fn origin(url: &str) -> Option<(String, String, u16)> {
    let u = Url::parse(url).ok()?;
    Some((
        u.scheme().to_owned(),
        u.host_str()?.to_ascii_lowercase(),
        u.port_or_known_default()?,
    ))
}
