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
pub mod referrers;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use oci_spec::distribution::Reference;
use reqwest::header::{
    HeaderMap, ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, LOCATION, RETRY_AFTER, WWW_AUTHENTICATE,
};
use reqwest::{Method, StatusCode};
use tokio::io::AsyncRead;
use tokio_util::io::StreamReader;

use crate::digest::sha256;
use crate::media::{Descriptor, Document, MANIFEST_ACCEPT, MANIFEST_MAX_BYTES};
use auth::{Auth, Scope};

/// A repository on a registry, as the user named it (`docker.io/gpustack/runner`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Repo {
    /// Registry host as written after Docker's normalisation (`docker.io`, `127.0.0.1:5000`).
    pub registry: String,
    pub repository: String,
}

impl Repo {
    /// Parses a repository name with Docker's conventions (`gpustack/runner` is on docker.io,
    /// `ubuntu` is `docker.io/library/ubuntu`); a tag or digest is refused.
    pub fn parse(input: &str) -> Result<Self, String> {
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
        Ok(Repo {
            registry: r.registry().to_owned(),
            repository: r.repository().to_owned(),
        })
    }

    /// Splits `REPO:TAG` or `REPO@DIGEST` into the repository and the reference to it.
    pub fn parse_reference(input: &str) -> Result<(Self, Reference), String> {
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

impl fmt::Display for Repo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

/// Walks an error's sources into one line (reqwest hides the useful part in them).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = inner.source();
    }
    s
}

/// A transport failure in a few words: what happened, with the innermost cause (reqwest's own
/// message repeats the URL, which the caller already names).
fn transport(e: &reqwest::Error) -> String {
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
    format!("{what}: {inner}")
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
}

/// One client for a run: connection pool, token cache, credentials.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

/// What a request is for, in errors and token scopes.
struct Call<'a> {
    op: &'static str,
    what: &'a str,
    repo: &'a Repo,
    scope: Scope,
}

impl<'a> Call<'a> {
    /// A read: the token needs pull on the repository.
    fn pull(op: &'static str, what: &'a str, repo: &'a Repo) -> Self {
        Call {
            op,
            what,
            repo,
            scope: Scope::pull(&repo.repository),
        }
    }

    /// A write: the token needs pull and push on the repository.
    fn push(op: &'static str, what: &'a str, repo: &'a Repo) -> Self {
        Call {
            op,
            what,
            repo,
            scope: Scope::push(&repo.repository),
        }
    }
}

/// How a request's body is made for each attempt.
enum Body {
    Empty,
    Bytes(Bytes),
}

impl Registry {
    /// A client for the given repositories: loopback ones over plain HTTP, others over TLS.
    pub fn new(repos: &[&Repo]) -> Self {
        let plain = repos
            .iter()
            .filter(|r| r.is_loopback())
            .map(|r| r.endpoint())
            .collect();
        let http = reqwest::Client::builder()
            .user_agent(concat!("runner-patch/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(120))
            .build()
            .unwrap_or_default();
        let auth = Auth::new(http.clone());
        Registry {
            inner: Arc::new(Inner {
                http,
                auth,
                plain,
                retry: Retry::default(),
            }),
        }
    }

    fn base(&self, repo: &Repo) -> String {
        let ep = repo.endpoint();
        let scheme = if self.inner.plain.contains(&ep) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{ep}/v2/{}", repo.repository)
    }

    /// Resolves an upload `Location` (absolute or relative) against the registry.
    fn absolute(&self, repo: &Repo, location: &str) -> String {
        if location.starts_with("http://") || location.starts_with("https://") {
            return location.to_owned();
        }
        let ep = repo.endpoint();
        let scheme = if self.inner.plain.contains(&ep) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{ep}{location}")
    }

    /// Sends one request with authentication and retries. Answers other than those the retry
    /// policy or authentication handle are returned to the caller to judge.
    async fn send(
        &self,
        call: Call<'_>,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Body,
    ) -> Result<reqwest::Response, RegistryError> {
        let Call {
            op,
            what,
            repo,
            scope,
        } = call;
        let scope = &scope;
        let retry = self.inner.retry;
        let started = Instant::now();
        let ep = repo.endpoint();
        let mut auth_tries = 0;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let authz = self
                .inner
                .auth
                .header(&repo.registry, &ep, scope)
                .await
                .map_err(|e| RegistryError::new(op, what, e.0, None))?;
            let mut req = self
                .inner
                .http
                .request(method.clone(), url)
                .headers(headers.clone());
            if let Some(a) = &authz {
                req = req.header(reqwest::header::AUTHORIZATION, a);
            }
            req = match &body {
                Body::Empty => req,
                Body::Bytes(b) => req.body(b.clone()),
            };
            let (wait, failure) = match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    if status == StatusCode::UNAUTHORIZED
                        || (status == StatusCode::FORBIDDEN
                            && authz.as_deref().is_some_and(|a| a.starts_with("Bearer")))
                    {
                        let challenge = resp
                            .headers()
                            .get(WWW_AUTHENTICATE)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        if auth_tries < 2
                            && self
                                .inner
                                .auth
                                .rejected(&ep, scope, challenge.as_deref(), authz.is_some())
                                .await
                        {
                            auth_tries += 1;
                            continue;
                        }
                        let body = resp.bytes().await.unwrap_or_default();
                        let hint = if authz.is_some() {
                            "credentials were rejected"
                        } else {
                            "authentication required and no credentials found"
                        };
                        return Err(RegistryError::new(
                            op,
                            what,
                            format!(
                                "HTTP {}: {hint}: {}",
                                status.as_u16(),
                                registry_message(&body)
                            ),
                            Some(status.as_u16()),
                        ));
                    }
                    if !retryable(status) {
                        return Ok(resp);
                    }
                    let wait = retry_after(resp.headers());
                    let body = resp.bytes().await.unwrap_or_default();
                    (
                        wait,
                        RegistryError::new(
                            op,
                            what,
                            format!("HTTP {}: {}", status.as_u16(), registry_message(&body)),
                            Some(status.as_u16()),
                        ),
                    )
                }
                Err(e) => (None, RegistryError::new(op, what, transport(&e), None)),
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
    /// under the manifest size limit.
    pub async fn manifest_get(&self, r: &Reference) -> Result<Document, RegistryError> {
        let repo = Self::repo_of(r);
        let what = r.whole();
        let op = "fetching manifest";
        let resp = self
            .send(
                Call::pull(op, &what, &repo),
                Method::GET,
                &self.manifest_url(r, &repo),
                Self::accept(),
                Body::Empty,
            )
            .await?;
        let status = resp.status();
        let headers = resp.headers().clone();
        if status != StatusCode::OK {
            let body = resp.bytes().await.unwrap_or_default();
            let msg = if status == StatusCode::NOT_FOUND {
                format!("not found ({})", registry_message(&body))
            } else {
                format!("HTTP {}: {}", status.as_u16(), registry_message(&body))
            };
            return Err(RegistryError::new(op, &what, msg, Some(status.as_u16())));
        }
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
        if resp
            .content_length()
            .is_some_and(|n| n > MANIFEST_MAX_BYTES as u64)
        {
            return Err(RegistryError::new(
                op,
                &what,
                format!("manifest is over the {MANIFEST_MAX_BYTES} byte limit"),
                None,
            ));
        }
        let mut body = Vec::new();
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                RegistryError::new(
                    op,
                    &what,
                    format!("reading the body failed: {}", chain(&e)),
                    None,
                )
            })?;
            body.extend_from_slice(&chunk);
            if body.len() > MANIFEST_MAX_BYTES {
                return Err(RegistryError::new(
                    op,
                    &what,
                    format!("manifest is over the {MANIFEST_MAX_BYTES} byte limit"),
                    None,
                ));
            }
        }
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
        let doc = Document::parse(body, &format!("manifest {what}"))
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
        match resp.status() {
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::OK => match resp
                .headers()
                .get("docker-content-digest")
                .and_then(|v| v.to_str().ok())
            {
                Some(d) if crate::digest::is_sha256(d.trim()) => Ok(Some(d.trim().to_owned())),
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
        let resp = self
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
            let body = resp.bytes().await.unwrap_or_default();
            return Err(RegistryError::new(
                op,
                &what,
                format!("HTTP {}: {}", status.as_u16(), registry_message(&body)),
                Some(status.as_u16()),
            ));
        }
        if let Some(d) = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
        {
            if d.trim() != doc.digest {
                return Err(RegistryError::new(
                    op,
                    &what,
                    format!("the registry stored digest {d}, not {}", doc.digest),
                    None,
                ));
            }
        }
        Ok(())
    }

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

    /// One GET of a blob from `offset` on; `Ok((response, skip))` where `skip` bytes must be
    /// dropped when the registry ignored the range.
    async fn blob_get_from(
        &self,
        repo: &Repo,
        digest: &str,
        offset: u64,
    ) -> Result<(reqwest::Response, u64), RegistryError> {
        let what = format!("{repo}@{digest}");
        let url = format!("{}/blobs/{digest}", self.base(repo));
        let mut h = HeaderMap::new();
        if offset > 0 {
            if let Ok(v) = format!("bytes={offset}-").parse() {
                h.insert(reqwest::header::RANGE, v);
            }
        }
        let resp = self
            .send(
                Call::pull("fetching blob", &what, repo),
                Method::GET,
                &url,
                h,
                Body::Empty,
            )
            .await?;
        match resp.status() {
            StatusCode::OK => Ok((resp, offset)),
            StatusCode::PARTIAL_CONTENT if offset > 0 => Ok((resp, 0)),
            s => {
                let body = resp.bytes().await.unwrap_or_default();
                Err(RegistryError::new(
                    "fetching blob",
                    &what,
                    format!("HTTP {}: {}", s.as_u16(), registry_message(&body)),
                    Some(s.as_u16()),
                ))
            }
        }
    }

    /// Streams a blob, verified: its sha256 and size are checked as the bytes pass (on the
    /// network side, so a consumer inflating them works in parallel), and the stream ends with
    /// an error instead of a clean end when they do not match. A connection that breaks mid-blob
    /// is resumed with a range request (or re-read from the start where ranges are not
    /// supported), within the retry policy.
    pub fn blob_stream(
        &self,
        repo: &Repo,
        desc: &Descriptor,
    ) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
        struct State {
            reg: Registry,
            repo: Repo,
            digest: String,
            size: u64,
            offset: u64,
            skip: u64,
            body: Option<futures_util::stream::BoxStream<'static, reqwest::Result<Bytes>>>,
            failures: u32,
            done: bool,
            hasher: sha2::Sha256,
        }
        let st = State {
            reg: self.clone(),
            repo: repo.clone(),
            digest: desc.digest.clone(),
            size: desc.size,
            offset: 0,
            skip: 0,
            body: None,
            failures: 0,
            done: false,
            hasher: sha2::Digest::new(),
        };
        futures_util::stream::unfold(st, |mut st| async move {
            loop {
                if st.done {
                    return None;
                }
                if st.body.is_none() {
                    match st.reg.blob_get_from(&st.repo, &st.digest, st.offset).await {
                        Ok((resp, skip)) => {
                            st.skip = skip;
                            st.body = Some(resp.bytes_stream().boxed());
                        }
                        Err(e) => {
                            st.done = true;
                            return Some((Err(std::io::Error::other(e)), st));
                        }
                    }
                }
                let next = st.body.as_mut().map(|b| b.next());
                let item = match next {
                    Some(fut) => fut.await,
                    None => None,
                };
                match item {
                    Some(Ok(mut chunk)) => {
                        if st.skip > 0 {
                            let n = (st.skip as usize).min(chunk.len());
                            chunk = chunk.slice(n..);
                            st.skip -= n as u64;
                            if chunk.is_empty() {
                                continue;
                            }
                        }
                        st.offset += chunk.len() as u64;
                        sha2::Digest::update(&mut st.hasher, &chunk);
                        return Some((Ok(chunk), st));
                    }
                    Some(Err(e)) => {
                        st.failures += 1;
                        st.body = None;
                        let retry = st.reg.inner.retry;
                        if st.failures >= retry.attempts {
                            st.done = true;
                            let msg = format!(
                                "fetching blob {}@{}: broken after {} bytes, {} times: {}",
                                st.repo,
                                st.digest,
                                st.offset,
                                st.failures,
                                chain(&e)
                            );
                            return Some((Err(std::io::Error::other(msg)), st));
                        }
                        let wait = retry.backoff(st.failures);
                        tracing::warn!("fetching blob {}@{}: connection broke after {} bytes ({}); resuming in {:.1}s", st.repo, st.digest, st.offset, chain(&e), wait.as_secs_f64());
                        tokio::time::sleep(wait).await;
                    }
                    None => {
                        st.done = true;
                        if st.offset < st.size && st.failures + 1 < st.reg.inner.retry.attempts {
                            // A clean close before the end: resume like a broken connection.
                            st.failures += 1;
                            st.done = false;
                            st.body = None;
                            tracing::warn!(
                                "fetching blob {}@{}: body ended after {} of {} bytes; resuming",
                                st.repo,
                                st.digest,
                                st.offset,
                                st.size
                            );
                            continue;
                        }
                        let actual = crate::digest::finish(std::mem::take(&mut st.hasher));
                        if actual != st.digest || st.offset != st.size {
                            let msg = format!(
                                "blob {}@{}: digest mismatch: the registry served {} bytes (the manifest says {}) whose digest is {actual}",
                                st.repo, st.digest, st.offset, st.size
                            );
                            return Some((Err(std::io::Error::other(msg)), st));
                        }
                        return None;
                    }
                }
            }
        })
    }

    /// Streams a blob as an `AsyncRead`.
    ///
    /// The download (socket reads, sha256) runs in its own task and hands chunks over a
    /// bounded channel, so it proceeds on another core while the reader inflates; the channel
    /// bounds what is buffered to a few MiB.
    pub async fn blob_reader(
        &self,
        repo: &Repo,
        desc: &Descriptor,
    ) -> Result<impl AsyncRead + Send + Unpin + 'static, RegistryError> {
        let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(16);
        let mut stream = Box::pin(self.blob_stream(repo, desc));
        tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                if tx.send(item).await.is_err() {
                    break; // the reader is gone
                }
            }
        });
        let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Ok(StreamReader::new(Box::pin(chunks)))
    }

    /// Reads a small blob (a config, the patch layer) whole, bounded and verified.
    pub async fn blob_get_small(
        &self,
        repo: &Repo,
        desc: &Descriptor,
        max: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let what = format!("{repo}@{}", desc.digest);
        if desc.size > max {
            return Err(RegistryError::new(
                "fetching blob",
                &what,
                format!("{} bytes is over the {max} byte limit", desc.size),
                None,
            ));
        }
        let mut out = Vec::with_capacity(desc.size as usize);
        let mut s = Box::pin(self.blob_stream(repo, desc));
        while let Some(chunk) = s.next().await {
            let chunk = chunk
                .map_err(|e| RegistryError::new("fetching blob", &what, e.to_string(), None))?;
            out.extend_from_slice(&chunk);
            if out.len() as u64 > max {
                return Err(RegistryError::new(
                    "fetching blob",
                    &what,
                    format!("more than {max} bytes served"),
                    None,
                ));
            }
        }
        let actual = sha256(&out);
        if actual != desc.digest || out.len() as u64 != desc.size {
            return Err(RegistryError::new(
                "fetching blob",
                &what,
                format!(
                    "digest mismatch: the registry served {} bytes whose digest is {actual}",
                    out.len()
                ),
                None,
            ));
        }
        Ok(out)
    }

    /// Starts an upload session; returns its absolute URL.
    async fn upload_start(&self, repo: &Repo, what: &str) -> Result<String, RegistryError> {
        let url = format!("{}/blobs/uploads/", self.base(repo));
        let resp = self
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
            let body = resp.bytes().await.unwrap_or_default();
            return Err(RegistryError::new(
                "uploading blob",
                what,
                format!("starting the upload: HTTP {s}: {}", registry_message(&body)),
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
        Ok(self.absolute(repo, loc))
    }

    fn with_digest(location: &str, digest: &str) -> String {
        let sep = if location.contains('?') { '&' } else { '?' };
        format!("{location}{sep}digest={digest}")
    }

    /// Abandons an upload session (best effort: the registry expires it anyway).
    async fn upload_cancel(&self, repo: &Repo, location: &str) {
        let _ = self.inner.http.delete(location).send().await;
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
        let resp = self
            .send(
                Call::push("uploading blob", &what, repo),
                Method::PUT,
                &Self::with_digest(&loc, digest),
                octet(),
                Body::Bytes(data.clone()),
            )
            .await?;
        if resp.status() == StatusCode::CREATED {
            return Ok(());
        }
        let first = format!(
            "HTTP {}: {}",
            resp.status().as_u16(),
            registry_message(&resp.bytes().await.unwrap_or_default())
        );
        self.upload_cancel(repo, &loc).await;
        tracing::warn!("uploading {what} in one request failed ({first}); trying a chunked upload");
        let loc = self.upload_start(repo, &what).await?;
        let mut h = octet();
        if let Ok(v) = format!("0-{}", data.len().saturating_sub(1)).parse() {
            h.insert("Content-Range", v);
        }
        let resp = self
            .send(
                Call::push("uploading blob", &what, repo),
                Method::PATCH,
                &loc,
                h,
                Body::Bytes(data),
            )
            .await?;
        if resp.status() != StatusCode::ACCEPTED {
            let s = resp.status().as_u16();
            self.upload_cancel(repo, &loc).await;
            return Err(RegistryError::new(
                "uploading blob",
                &what,
                format!("chunk: HTTP {s}"),
                Some(s),
            ));
        }
        let loc = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(|l| self.absolute(repo, l))
            .unwrap_or(loc);
        let resp = self
            .send(
                Call::push("uploading blob", &what, repo),
                Method::PUT,
                &Self::with_digest(&loc, digest),
                octet(),
                Body::Empty,
            )
            .await?;
        if resp.status() != StatusCode::CREATED {
            let s = resp.status().as_u16();
            return Err(RegistryError::new(
                "uploading blob",
                &what,
                format!(
                    "commit: HTTP {s}: {}",
                    registry_message(&resp.bytes().await.unwrap_or_default())
                ),
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
        let scope = Scope::mount(&target.repository, &source.repository);
        match self
            .send(
                Call {
                    op: "mounting blob",
                    what: &what,
                    repo: target,
                    scope,
                },
                Method::POST,
                &url,
                HeaderMap::new(),
                Body::Empty,
            )
            .await
        {
            Ok(resp) if resp.status() == StatusCode::CREATED => true,
            Ok(resp) => {
                if resp.status() == StatusCode::ACCEPTED {
                    // The registry opened an upload instead of mounting; close it.
                    if let Some(loc) = resp.headers().get(LOCATION).and_then(|v| v.to_str().ok()) {
                        let loc = self.absolute(target, loc);
                        self.upload_cancel(target, &loc).await;
                    }
                }
                tracing::debug!(
                    "mount of {digest} from {source} into {target} declined: HTTP {}",
                    resp.status().as_u16()
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
    /// broken transfer is retried whole, within the retry policy.
    pub async fn blob_copy(
        &self,
        source: &Repo,
        target: &Repo,
        desc: &Descriptor,
    ) -> Result<(), RegistryError> {
        let what = format!("{source}@{} to {target}", desc.digest);
        let retry = self.inner.retry;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let loc = self.upload_start(target, &what).await?;
            let short = desc.digest.get(7..19).unwrap_or(&desc.digest);
            let bar = crate::report::bar(format!("copy {short} to {}", target.registry), desc.size);
            let counted = bar.clone();
            let stream = self
                .blob_stream(source, desc)
                .inspect_ok(move |c| counted.inc(c.len() as u64));
            let ep = target.endpoint();
            let authz = self
                .inner
                .auth
                .header(&target.registry, &ep, &Scope::push(&target.repository))
                .await
                .map_err(|e| RegistryError::new("copying blob", &what, e.0, None))?;
            let mut req = self
                .inner
                .http
                .put(Self::with_digest(&loc, &desc.digest))
                .header(CONTENT_TYPE, "application/octet-stream")
                .header(CONTENT_LENGTH, desc.size)
                .body(reqwest::Body::wrap_stream(stream));
            if let Some(a) = authz {
                req = req.header(reqwest::header::AUTHORIZATION, a);
            }
            let sent = req.send().await;
            bar.finish_and_clear();
            let failure = match sent {
                Ok(resp) if resp.status() == StatusCode::CREATED => return Ok(()),
                Ok(resp) => {
                    let s = resp.status();
                    let msg = format!(
                        "HTTP {}: {}",
                        s.as_u16(),
                        registry_message(&resp.bytes().await.unwrap_or_default())
                    );
                    if !retryable(s) {
                        self.upload_cancel(target, &loc).await;
                        return Err(RegistryError::new(
                            "copying blob",
                            &what,
                            msg,
                            Some(s.as_u16()),
                        ));
                    }
                    msg
                }
                Err(e) => transport(&e),
            };
            self.upload_cancel(target, &loc).await;
            if attempt >= retry.attempts {
                return Err(RegistryError::new("copying blob", &what, failure, None));
            }
            let wait = retry.backoff(attempt);
            tracing::warn!(
                "copying blob {what}: {failure}; retry {attempt}/{} in {:.1}s",
                retry.attempts - 1,
                wait.as_secs_f64()
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// Every tag of a repository, following `Link` pagination.
    pub async fn tags_list(&self, repo: &Repo) -> Result<Vec<String>, RegistryError> {
        let what = repo.to_string();
        let mut url = format!("{}/tags/list?n=1000", self.base(repo));
        let mut tags = Vec::new();
        for _ in 0..10_000 {
            let resp = self
                .send(
                    Call::pull("listing tags of", &what, repo),
                    Method::GET,
                    &url,
                    HeaderMap::new(),
                    Body::Empty,
                )
                .await?;
            let status = resp.status();
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
                .bytes()
                .await
                .map_err(|e| RegistryError::new("listing tags of", &what, chain(&e), None))?;
            if status != StatusCode::OK {
                return Err(RegistryError::new(
                    "listing tags of",
                    &what,
                    format!("HTTP {}: {}", status.as_u16(), registry_message(&body)),
                    Some(status.as_u16()),
                ));
            }
            let v: serde_json::Value = serde_json::from_slice(&body).map_err(|_| {
                RegistryError::new("listing tags of", &what, "the answer is not JSON", None)
            })?;
            tags.extend(
                v.get("tags")
                    .and_then(|t| t.as_array())
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.as_str().map(str::to_owned)),
            );
            match next {
                Some(n) => url = self.absolute(repo, &n),
                None => return Ok(tags),
            }
        }
        Err(RegistryError::new(
            "listing tags of",
            &what,
            "more than 10000 pages",
            None,
        ))
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
        let (repo, r) = Repo::parse_reference("127.0.0.1:5000/a/b:t1").expect("ref");
        assert_eq!((repo.repository.as_str(), r.tag()), ("a/b", Some("t1")));
        assert!(Repo::parse_reference("127.0.0.1:5000/a/b").is_err());
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
