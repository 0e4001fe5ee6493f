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
pub mod layout;
mod reference;
pub mod referrers;
pub mod store;
pub mod transport;

pub use store::Registry;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oci_spec::distribution::Reference;
use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Method, StatusCode};

use crate::digest::sha256;
use crate::media::{Document, MANIFEST_ACCEPT, MANIFEST_MAX_BYTES};
use auth::Auth;
use transport::{limits, Body, Call, TAGS_PAGE_MAX};

/// A repository on a registry, as the user named it (`docker.io/gpustack/runner`), or an OCI
/// layout directory (`oci:PATH`: `registry` empty, `repository` `oci:PATH`, so that references
/// to it print as skopeo writes them, `oci:PATH:TAG`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Repo {
    /// Registry host as written after Docker's normalisation (`docker.io`, `127.0.0.1:5000`);
    /// empty for a layout.
    pub registry: String,
    pub repository: String,
}

impl Repo {
    /// Parses a repository name with Docker's conventions (`gpustack/runner` is on docker.io,
    /// `ubuntu` is `docker.io/library/ubuntu`; `docker://` may lead), or `oci:PATH`; a tag or
    /// digest is refused, and so is any other transport.
    pub fn parse(input: &str) -> Result<Self, String> {
        let input = match reference::transport(input)? {
            reference::Named::Layout(path) => return Repo::layout(input, path),
            reference::Named::Registry(name) => name,
        };
        // oci-spec's grammar has no IPv6 literals; Docker accepts `[::1]:5000/repo`.
        if let Some((host, path)) = input.strip_prefix('[').and_then(|_| input.split_once('/')) {
            let r: Reference = format!("localhost/{path}")
                .parse()
                .map_err(|e| format!("{input:?} is not a valid repository reference: {e}"))?;
            if path.contains(':') || path.contains('@') {
                return Err(format!(
                    "{input:?} names a tag or digest; give the repository only (tags go in --tag)"
                ));
            }
            check_host(input, host)?;
            return Ok(Repo {
                registry: host.to_owned(),
                repository: r.repository().to_owned(),
            });
        }
        let r: Reference = input
            .parse()
            .map_err(|e| format!("{input:?} is not a valid repository reference: {e}"))?;
        // oci-spec fills in "latest" when no tag was given; refuse an explicit one.
        let last = input.rsplit('/').next().unwrap_or(input);
        if input.contains('@') || last.contains(':') {
            return Err(format!(
                "{input:?} names a tag or digest; give the repository only (tags go in --tag)"
            ));
        }
        check_host(input, r.registry())?;
        Ok(Repo {
            registry: r.registry().to_owned(),
            repository: r.repository().to_owned(),
        })
    }

    /// Splits `REPO:TAG` or `REPO@DIGEST` into the repository and the reference to it
    /// (`oci:PATH:TAG` at the last colon, as skopeo does).
    pub fn parse_reference(input: &str) -> Result<(Self, Reference), String> {
        let input = match reference::transport(input)? {
            reference::Named::Layout(_) => return reference::layout_reference(input),
            reference::Named::Registry(name) => name,
        };
        let (repo, rest, is_digest) = if let Some((r, d)) = input.split_once('@') {
            (r, d, true)
        } else {
            let slash = input.rfind('/').unwrap_or(0);
            match input[slash..].rfind(':') {
                Some(i) => (&input[..slash + i], &input[slash + i + 1..], false),
                None => {
                    return Err(format!(
                        "{input:?} names no tag or digest (REPO:TAG or REPO@DIGEST)"
                    ))
                }
            }
        };
        let repo = Repo::parse(repo)?;
        let r = if is_digest {
            if !crate::digest::is_sha256(rest) {
                return Err(format!("{input:?}: {rest:?} is not a sha256 digest"));
            }
            repo.at_digest(rest)
        } else {
            if rest.is_empty()
                || rest.len() > 128
                || !rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                return Err(format!("{input:?}: {rest:?} is not a valid tag"));
            }
            repo.at_tag(rest)
        };
        Ok((repo, r))
    }

    /// The OCI layout directory this repository is, if it is one.
    pub fn layout_path(&self) -> Option<&str> {
        if self.registry.is_empty() {
            self.repository.strip_prefix("oci:")
        } else {
            None
        }
    }

    pub fn at_tag(&self, tag: &str) -> Reference {
        Reference::with_tag(
            self.registry.clone(),
            self.repository.clone(),
            tag.to_owned(),
        )
    }

    pub fn at_digest(&self, digest: &str) -> Reference {
        Reference::with_digest(
            self.registry.clone(),
            self.repository.clone(),
            digest.to_owned(),
        )
    }

    /// The host that serves the registry's API: Docker Hub's `docker.io` is served by
    /// `registry-1.docker.io`.
    pub fn endpoint(&self) -> String {
        match self.registry.as_str() {
            "docker.io" | "index.docker.io" => "registry-1.docker.io".to_owned(),
            r => r.to_owned(),
        }
    }

    /// Loopback registries are spoken to over plain HTTP, as Docker does; all others over TLS.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or(rest).to_owned(),
            None => self
                .registry
                .split(':')
                .next()
                .unwrap_or(&self.registry)
                .to_owned(),
        };
        host == "localhost"
            || host == "::1"
            || host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

/// Refuses a registry host no request could reach, before any traffic: a port outside
/// 1-65535, a DNS label over 63 bytes or a name over 253, a bracketed address that is not IPv6.
fn check_host(input: &str, registry: &str) -> Result<(), String> {
    let bad = |why: String| {
        Err(format!(
            "{input:?} names registry host {registry:?}, which {why}"
        ))
    };
    let (host, port) = match registry.strip_prefix('[') {
        Some(rest) => {
            let Some((addr, after)) = rest.split_once(']') else {
                return bad("has no closing ']'".into());
            };
            if addr.parse::<std::net::Ipv6Addr>().is_err() {
                return bad(format!(
                    "puts {addr:?} in brackets, which is not an IPv6 address"
                ));
            }
            match after {
                "" => (addr, None),
                p => match p.strip_prefix(':') {
                    Some(p) => (addr, Some(p)),
                    None => return bad("has text after the IPv6 address".into()),
                },
            }
        }
        None => match registry.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (registry, None),
        },
    };
    if let Some(p) = port {
        if !p.parse::<u16>().is_ok_and(|n| n > 0) {
            return bad(format!("has port {p:?}, not a number from 1 to 65535"));
        }
    }
    if !registry.starts_with('[') {
        if host.len() > 253 {
            return bad("is longer than 253 characters".into());
        }
        if let Some(l) = host.split('.').find(|l| l.is_empty() || l.len() > 63) {
            return bad(format!(
                "has a label of {} characters (1 to 63 allowed)",
                l.len()
            ));
        }
    }
    if reqwest::Url::parse(&format!("https://{registry}/")).is_err() {
        return bad("is not a valid host".into());
    }
    Ok(())
}

impl fmt::Display for Repo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.registry.is_empty() {
            return write!(f, "{}", self.repository);
        }
        write!(f, "{}/{}", self.registry, self.repository)
    }
}

/// A registry failure: what was being done, to what, and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("{op} {what}: {detail}")]
pub struct RegistryError {
    pub op: &'static str,
    pub what: String,
    pub detail: String,
    pub status: Option<u16>,
}

impl RegistryError {
    fn new(op: &'static str, what: &str, detail: impl Into<String>, status: Option<u16>) -> Self {
        RegistryError {
            op,
            what: what.to_owned(),
            detail: detail.into(),
            status,
        }
    }
}

/// Retry policy for transient failures: exponential backoff with jitter, bounded in count and
/// in total time. `RUNNER_PATCH_RETRIES` overrides the count (0 turns retries off).
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub attempts: u32,
    pub base: Duration,
    pub cap: Duration,
    pub budget: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        let attempts = std::env::var("RUNNER_PATCH_RETRIES")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .map_or(6, |n| n + 1);
        Retry {
            attempts,
            base: Duration::from_millis(200),
            cap: Duration::from_secs(10),
            budget: Duration::from_secs(120),
        }
    }
}

impl Retry {
    /// The wait before attempt `n` (1-based retry count), with ±50% jitter.
    fn backoff(&self, n: u32) -> Duration {
        let exp = self.base.saturating_mul(1u32 << n.min(16)).min(self.cap);
        // Jitter from the clock's sub-second part, so runs and processes spread their retries.
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let nanos = clock ^ std::process::id().rotate_left(n);
        let jitter = 0.5 + f64::from(nanos % 1000) / 1000.0;
        exp.mul_f64(jitter)
    }
}

/// Statuses worth another try: timeouts, rate limits and server-side failures.
fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504)
}

/// `Retry-After` in seconds (the HTTP-date form is treated as "soon").
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let v = h.get(RETRY_AFTER)?.to_str().ok()?;
    Some(Duration::from_secs(
        v.trim().parse::<u64>().unwrap_or(1).min(60),
    ))
}

/// The registry's own error message, shortened, from a JSON error envelope or the body text.
fn registry_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(errs) = v.get("errors").and_then(|e| e.as_array()) {
            let msgs: Vec<String> = errs
                .iter()
                .map(|e| {
                    format!(
                        "{} {}",
                        e.get("code").and_then(|c| c.as_str()).unwrap_or(""),
                        e.get("message").and_then(|c| c.as_str()).unwrap_or("")
                    )
                    .trim()
                    .to_owned()
                })
                .collect();
            return msgs.join("; ");
        }
    }
    let text: String = String::from_utf8_lossy(body).chars().take(120).collect();
    text.replace(['\n', '\r'], " ").trim().to_owned()
}

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

    /// GETs a manifest or index by tag or digest. The answer must be a manifest media type, carry
    /// a `Docker-Content-Digest` that matches its bytes (and the digest asked for), and stay
    /// under the manifest size limit while it streams.
    pub async fn manifest_get(&self, r: &Reference) -> Result<Document, RegistryError> {
        let repo = Self::repo_of(r);
        let what = r.whole();
        let op = "fetching manifest";
        let max = MANIFEST_MAX_BYTES as u64;
        let mut resp = self
            .send(
                Call::pull(op, &what, &repo).moving(max),
                Method::GET,
                &self.manifest_url(r, &repo),
                Self::accept(),
                Body::Empty,
            )
            .await?;
        let status = resp.status();
        if status != StatusCode::OK {
            let msg = if status == StatusCode::NOT_FOUND {
                let m = resp.error_text().await;
                if m.is_empty() {
                    "not found".to_owned()
                } else {
                    format!("not found ({m})")
                }
            } else {
                resp.failure().await
            };
            return Err(RegistryError::new(op, &what, msg, Some(status.as_u16())));
        }
        let headers = resp.headers().clone();
        let ct = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_owned();
        if !MANIFEST_ACCEPT.contains(&ct.as_str()) {
            return Err(RegistryError::new(op, &what, format!("the registry answered Content-Type {ct:?}, not a manifest type; refusing to read it"), None));
        }
        // The deadline scales with the size announced (a trickle of a small manifest ends soon).
        if let Some(n) = resp.resp.content_length() {
            resp.expect(n.min(max));
        }
        let body = resp
            .body(max, "manifests")
            .await
            .map_err(|detail| RegistryError::new(op, &what, detail, None))?;
        let digest = sha256(&body);
        match headers
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
        {
            None => return Err(RegistryError::new(
                op,
                &what,
                "the registry sent no Docker-Content-Digest header; refusing to trust the manifest",
                None,
            )),
            Some(h) if h.trim() != digest => {
                return Err(RegistryError::new(
                    op,
                    &what,
                    format!(
                        "Docker-Content-Digest says {h} but the bytes served have digest {digest}"
                    ),
                    None,
                ))
            }
            Some(_) => {}
        }
        if let Some(d) = r.digest() {
            if d != digest {
                return Err(RegistryError::new(
                    op,
                    &what,
                    format!("served bytes have digest {digest}"),
                    None,
                ));
            }
        }
        let doc = Document::parse(body, "the manifest")
            .map_err(|detail| RegistryError::new("reading manifest", &what, detail, None))?;
        if doc.media_type != ct {
            return Err(RegistryError::new(
                op,
                &what,
                format!(
                    "Content-Type {ct} differs from the document's mediaType {}",
                    doc.media_type
                ),
                None,
            ));
        }
        Ok(doc)
    }

    /// The digest a tag (or digest) resolves to now, or `None` when it does not exist. A HEAD,
    /// which Docker Hub does not count against pull limits.
    pub async fn manifest_digest(&self, r: &Reference) -> Result<Option<String>, RegistryError> {
        let repo = Self::repo_of(r);
        let what = r.whole();
        let resp = self
            .send(
                Call::pull("resolving", &what, &repo),
                Method::HEAD,
                &self.manifest_url(r, &repo),
                Self::accept(),
                Body::Empty,
            )
            .await?;
        let status = resp.status();
        let header = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(|d| d.trim().to_owned());
        // Give the slot back before a GET needs one.
        drop(resp);
        match status {
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::OK => match header {
                Some(d) if crate::digest::is_sha256(&d) => Ok(Some(d)),
                _ => Ok(Some(self.manifest_get(r).await?.digest)),
            },
            s => Err(RegistryError::new(
                "resolving",
                &what,
                format!("HTTP {}", s.as_u16()),
                Some(s.as_u16()),
            )),
        }
    }

    /// PUTs a manifest's exact bytes under a tag or digest, with its own media type.
    pub async fn manifest_put(&self, r: &Reference, doc: &Document) -> Result<(), RegistryError> {
        self.manifest_put_answer(r, doc).await.map(|_| ())
    }

    /// [`Http::manifest_put`], returning the `OCI-Subject` header of the answer (a registry
    /// that keeps referrers itself names the subject there).
    pub(crate) async fn manifest_put_answer(
        &self,
        r: &Reference,
        doc: &Document,
    ) -> Result<Option<String>, RegistryError> {
        let repo = Self::repo_of(r);
        let what = r.whole();
        let op = "pushing manifest";
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            doc.media_type.parse().map_err(|_| {
                RegistryError::new(
                    op,
                    &what,
                    format!("media type {:?} is not a valid header", doc.media_type),
                    None,
                )
            })?,
        );
        let mut resp = self
            .send(
                Call::push(op, &what, &repo),
                Method::PUT,
                &self.manifest_url(r, &repo),
                h,
                Body::Bytes(Bytes::from(doc.bytes.clone())),
            )
            .await?;
        let status = resp.status();
        if status != StatusCode::CREATED && status != StatusCode::OK {
            let detail = resp.failure().await;
            return Err(RegistryError::new(op, &what, detail, Some(status.as_u16())));
        }
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_owned())
        };
        if let Some(d) = header("docker-content-digest") {
            if d != doc.digest {
                return Err(RegistryError::new(
                    op,
                    &what,
                    format!("the registry stored digest {d}, not {}", doc.digest),
                    None,
                ));
            }
        }
        Ok(header("oci-subject"))
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_parsing_follows_docker() {
        let r = Repo::parse("gpustack/runner").expect("parse");
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            ("docker.io", "gpustack/runner")
        );
        assert_eq!(r.endpoint(), "registry-1.docker.io");
        let r = Repo::parse("docker.io/ubuntu").expect("parse");
        assert_eq!(r.repository, "library/ubuntu");
        let r = Repo::parse("127.0.0.1:5000/gpustack/runner").expect("parse");
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert!(r.is_loopback());
        assert!(Repo::parse("localhost:5000/a")
            .expect("parse")
            .is_loopback());
        assert!(Repo::parse("[::1]:5000/a").expect("parse").is_loopback());
        assert!(!Repo::parse("quay.io/gpustack/runner")
            .expect("parse")
            .is_loopback());
        assert!(Repo::parse("gpustack/runner:tag").is_err());
        assert!(Repo::parse("Bad Name/x").is_err());
        // Hosts no request could reach are refused at parse time.
        for bad in [
            "127.0.0.1:99999/a",
            "127.0.0.1:0/a",
            "[zz]:5000/a",
            "[::1/a",
            &format!("{}.example/a", "x".repeat(64)),
        ] {
            let e = Repo::parse(bad).expect_err(bad);
            assert!(e.contains("registry host"), "{bad}: {e}");
        }
        assert!(Repo::parse("[::1]:5000/a").is_ok() && Repo::parse("[::1]/a").is_ok());
        let (repo, r) = Repo::parse_reference("127.0.0.1:5000/a/b:t1").expect("ref");
        assert_eq!((repo.repository.as_str(), r.tag()), ("a/b", Some("t1")));
        assert!(Repo::parse_reference("127.0.0.1:5000/a/b").is_err());
    }

    #[test]
    fn urls_the_registry_names_are_resolved_and_only_its_origin_is_its_own() {
        let repo = Repo::parse("127.0.0.1:5000/a/b").expect("parse");
        let reg = Http::new(&[&repo]).expect("client");
        assert_eq!(
            reg.absolute(&repo, "/v2/a/b/blobs/uploads/x?s=1"),
            "http://127.0.0.1:5000/v2/a/b/blobs/uploads/x?s=1"
        );
        assert_eq!(
            reg.absolute(&repo, "//other.example:9000/u"),
            "http://other.example:9000/u"
        );
        assert!(reg.is_own(&repo, "http://127.0.0.1:5000/v2/a/b/tags/list?last=x"));
        for foreign in [
            "http://127.0.0.1:5001/v2/",
            "https://127.0.0.1:5000/v2/",
            "http://localhost:5000/v2/",
            "http://127.0.0.1:5000@evil.example/v2/",
            "not a url",
        ] {
            assert!(!reg.is_own(&repo, foreign), "{foreign}");
        }
        let hub = Repo::parse("gpustack/runner").expect("parse");
        assert!(reg.is_own(&hub, "https://registry-1.docker.io:443/v2/x"));
        assert!(!reg.is_own(&hub, "https://docker.io/v2/x"));
    }

    #[test]
    fn deadlines_grow_with_size_at_the_min_rate() {
        let l = transport::Limits {
            base: Duration::from_secs(10),
            min_rate: 1024,
            ..transport::Limits::default()
        };
        assert_eq!(l.deadline(0), Duration::from_secs(10));
        assert_eq!(l.deadline(10 * 1024), Duration::from_secs(20));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let r = Retry {
            attempts: 5,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
            budget: Duration::from_secs(10),
        };
        assert!(r.backoff(1) <= Duration::from_millis(300));
        assert!(r.backoff(10) <= Duration::from_millis(1500));
        assert!(retryable(StatusCode::TOO_MANY_REQUESTS) && !retryable(StatusCode::NOT_FOUND));
    }
}
