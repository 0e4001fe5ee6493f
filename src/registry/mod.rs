//! The registry client: the distribution API calls this tool makes, behind noun-verb methods,
//! with retries, authentication, and checks on everything a registry answers.
//!
//! Why not oci-client: it was the first choice and carried the first version of this tool, but
//! what release pipelines need from it is what it cannot do (see its documented limits in the
//! project notes): one token cannot hold pull on a mount's source and push on its target (Docker
//! Hub then refuses every mount), response headers are not exposed (no `Retry-After`, no
//! `Content-Type` or `Docker-Content-Digest` checks), a HEAD 404 and a 500 look alike, a 403 on an
//! expired token is not retried, and a broken blob download cannot resume. So requests are made
//! here with reqwest; references are still parsed by oci-spec.

pub mod auth;
mod blobs;
mod errors;
pub mod layout;
mod manifests;
mod reference;
pub mod referrers;
mod repo;
pub mod store;
mod tags;
#[cfg(test)]
mod tests;
pub mod transport;
mod uploads;

pub(crate) use errors::{registry_message, retry_after, retryable};
pub use errors::{RegistryError, Retry};
pub use repo::Repo;
pub use store::Registry;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use oci_spec::distribution::Reference;
use reqwest::header::{HeaderMap, ACCEPT};

use crate::media::MANIFEST_ACCEPT;
use auth::Auth;
use transport::limits;

struct Inner {
    http: reqwest::Client,
    auth: Auth,
    plain: HashSet<String>,
    retry: Retry,
    /// Requests in flight at once, across every task of the run.
    slots: Arc<tokio::sync::Semaphore>,
}

/// One client for a run: connection pool, token cache, credentials, and the bound on requests
/// in flight.
#[derive(Clone)]
pub struct Http {
    inner: Arc<Inner>,
}

impl Http {
    /// A client for the given repositories: loopback ones over plain HTTP, others over TLS; at
    /// most the configured number of requests in flight.
    pub fn new(repos: &[&Repo]) -> Result<Self, RegistryError> {
        Self::with_concurrency(repos, limits().max_requests)
    }

    /// As [`Http::new`], with at most `max_requests` requests in flight at once (at least
    /// two: a cross-registry copy reads and writes together), so that an index with thousands of
    /// children never opens thousands of connections.
    pub fn with_concurrency(repos: &[&Repo], max_requests: usize) -> Result<Self, RegistryError> {
        let plain = repos
            .iter()
            .filter(|r| r.is_loopback())
            .map(|r| r.endpoint())
            .collect();
        let lim = limits();
        let http = reqwest::Client::builder()
            .user_agent(concat!("runner-patch/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(lim.idle)
            // Backstop only: the bounded reads in `transport` fail first with a clearer message.
            .read_timeout(lim.idle + Duration::from_secs(1))
            // Idle connections beyond the requests in flight are closed, not pooled.
            .pool_max_idle_per_host(max_requests.max(2))
            .build()
            // Without a CA bundle the TLS set-up fails; say so instead of panicking later.
            .map_err(|e| {
                RegistryError::new(
                    "setting up",
                    "the HTTPS client",
                    format!(
                        "{}; TLS needs the system's CA certificates (the ca-certificates package)",
                        transport::transport(&e)
                    ),
                    None,
                )
            })?;
        let auth = Auth::new(http.clone());
        Ok(Http {
            inner: Arc::new(Inner {
                http,
                auth,
                plain,
                retry: Retry::default(),
                slots: Arc::new(tokio::sync::Semaphore::new(max_requests.max(2))),
            }),
        })
    }

    fn base(&self, repo: &Repo) -> String {
        format!("{}/v2/{}", self.origin_of(repo), repo.repository)
    }

    /// Resolves a URL the registry named (upload `Location`, tag-list `Link`: absolute,
    /// scheme-relative or a path) against the registry's origin, as a browser would.
    fn absolute(&self, repo: &Repo, location: &str) -> String {
        let base = format!("{}/", self.origin_of(repo));
        match reqwest::Url::parse(&base).and_then(|b| b.join(location.trim())) {
            Ok(u) => u.to_string(),
            Err(_) => format!("{}{location}", self.origin_of(repo)),
        }
    }

    fn manifest_url(&self, r: &Reference, repo: &Repo) -> String {
        let reference = r.digest().or(r.tag()).unwrap_or("latest");
        format!("{}/manifests/{reference}", self.base(repo))
    }

    fn repo_of(r: &Reference) -> Repo {
        Repo {
            registry: r.registry().to_owned(),
            repository: r.repository().to_owned(),
        }
    }

    fn accept() -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = MANIFEST_ACCEPT.join(", ").parse() {
            h.insert(ACCEPT, v);
        }
        h
    }
}
