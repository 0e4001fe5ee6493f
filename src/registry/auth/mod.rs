//! Registry authentication as docker, skopeo and crane users expect it: credentials from the
//! environment or Docker/podman auth files (with credential helpers), Basic auth where the
//! registry asks for it, and Bearer tokens from the registry's token service, cached per scope
//! until they expire and fetched again when the registry rejects them mid-run.
//!
//! Secrets never reach a log line or an error message: [`Credential`] redacts itself, and tokens
//! are only ever put into an `Authorization` header.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Mutex;

mod credentials;
pub use credentials::{lookup, Credential};

/// How a registry asked to be authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

/// Parses `WWW-Authenticate: Bearer realm="...",service="...",scope="..."` or `Basic realm=...`.
fn parse_challenge(h: &str) -> Option<Challenge> {
    let h = h.trim();
    let (scheme, rest) = h.split_once(' ').unwrap_or((h, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut params = HashMap::new();
    let mut s = rest;
    while !s.is_empty() {
        let Some((k, after)) = s.split_once('=') else {
            break;
        };
        let k = k.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let (v, tail) = match after.strip_prefix('"') {
            Some(q) => match q.find('"') {
                Some(end) => (&q[..end], &q[end + 1..]),
                None => (q, ""),
            },
            None => match after.find(',') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            },
        };
        params.insert(k, v.to_owned());
        s = tail.trim_start_matches(',').trim_start();
    }
    Some(Challenge::Bearer {
        realm: params.remove("realm")?,
        service: params.remove("service"),
    })
}

/// What a token request asks for: `repository:<name>:<actions>` entries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope(pub Vec<String>);

impl Scope {
    pub fn pull(repo: &str) -> Self {
        Scope(vec![format!("repository:{repo}:pull")])
    }
    pub fn push(repo: &str) -> Self {
        Scope(vec![format!("repository:{repo}:pull,push")])
    }
    /// One token for a cross-repository mount: push on the target and pull on the source
    /// (oci-client asks for the target only, and Docker Hub then refuses the mount).
    pub fn mount(target: &str, source: &str) -> Self {
        Scope(vec![
            format!("repository:{target}:pull,push"),
            format!("repository:{source}:pull"),
        ])
    }
}

struct Token {
    value: String,
    expires: Instant,
}

/// Per-run authentication state, shared by all requests.
pub struct Auth {
    http: reqwest::Client,
    /// Per registry: its credentials, or why they could not be read (a helper that hung is
    /// not asked again by every request).
    creds: Mutex<HashMap<String, Result<Option<Credential>, String>>>,
    challenges: Mutex<HashMap<String, Challenge>>,
    tokens: Mutex<HashMap<(String, Scope), Token>>,
}

/// A credential error: one sentence, no secret.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub String);

impl Auth {
    pub fn new(http: reqwest::Client) -> Self {
        Auth {
            http,
            creds: Mutex::default(),
            challenges: Mutex::default(),
            tokens: Mutex::default(),
        }
    }

    async fn credential(&self, registry: &str) -> Result<Option<Credential>, AuthError> {
        let mut creds = self.creds.lock().await;
        if let Some(c) = creds.get(registry) {
            return c.clone().map_err(AuthError);
        }
        // Auth files and helpers are read off the async workers: a helper may take seconds.
        let name = registry.to_owned();
        let c = tokio::task::spawn_blocking(move || lookup(&name))
            .await
            .map_err(|e| {
                AuthError(format!(
                    "looking up credentials for {registry} failed ({e})"
                ))
            })?;
        match &c {
            Ok(Some(c)) => tracing::debug!("credentials for {registry} from {}", c.source),
            Ok(None) => tracing::debug!("no credentials for {registry}; anonymous"),
            Err(_) => {}
        }
        creds.insert(registry.to_owned(), c.clone());
        c.map_err(AuthError)
    }

    /// The `Authorization` header for a request, when the registry has asked for one before.
    pub async fn header(
        &self,
        registry: &str,
        endpoint: &str,
        scope: &Scope,
    ) -> Result<Option<String>, AuthError> {
        let challenge = self.challenges.lock().await.get(endpoint).cloned();
        match challenge {
            None => Ok(None),
            Some(Challenge::Basic) => {
                Ok(self.credential(registry).await?.map(|c| c.basic_header()))
            }
            Some(Challenge::Bearer { realm, service }) => {
                let key = (endpoint.to_owned(), scope.clone());
                if let Some(t) = self.tokens.lock().await.get(&key) {
                    if t.expires > Instant::now() {
                        return Ok(Some(format!("Bearer {}", t.value)));
                    }
                }
                let token = self
                    .fetch_token(registry, &realm, service.as_deref(), scope)
                    .await?;
                let header = format!("Bearer {}", token.value);
                self.tokens.lock().await.insert(key, token);
                Ok(Some(header))
            }
        }
    }

    /// Handles a 401 (or a 403 on a token): records the challenge and forgets the token used,
    /// so the retry authenticates afresh. Returns false when retrying cannot help.
    pub async fn rejected(
        &self,
        endpoint: &str,
        scope: &Scope,
        www_authenticate: Option<&str>,
        had_auth: bool,
    ) -> bool {
        self.tokens
            .lock()
            .await
            .remove(&(endpoint.to_owned(), scope.clone()));
        let Some(c) = www_authenticate.and_then(parse_challenge) else {
            return had_auth;
        };
        self.challenges.lock().await.insert(endpoint.to_owned(), c);
        // Retry: this response taught the challenge, or the credentials sent were refused (a
        // fresh token may help), or this anonymous request raced another one that learned the
        // same challenge and has not tried authenticating yet. The caller bounds the retries.
        true
    }

    async fn fetch_token(
        &self,
        registry: &str,
        realm: &str,
        service: Option<&str>,
        scope: &Scope,
    ) -> Result<Token, AuthError> {
        let mut query: Vec<(&str, &str)> = Vec::new();
        if let Some(s) = service {
            query.push(("service", s));
        }
        for s in &scope.0 {
            query.push(("scope", s.as_str()));
        }
        let mut req = self.http.get(realm).query(&query);
        let cred = self.credential(registry).await?;
        if let Some(c) = &cred {
            req = req.header(reqwest::header::AUTHORIZATION, c.basic_header());
        }
        let realm_host = reqwest::Url::parse(realm)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_default();
        let lim = super::transport::limits();
        let deadline = lim.deadline(super::transport::TOKEN_MAX);
        let started = Instant::now();
        let sent = tokio::time::timeout(lim.idle, req.timeout(deadline).send()).await;
        let mut resp = match sent {
            Err(_) => {
                return Err(AuthError(format!(
                    "token service of {registry} ({realm_host}) did not answer within {} s (--idle-timeout)",
                    lim.idle.as_secs()
                )))
            }
            Ok(Err(e)) => {
                return Err(AuthError(format!(
                    "token service of {registry} ({realm_host}) unreachable: {}",
                    super::transport::transport(&e)
                )))
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if !status.is_success() {
            let who = match &cred {
                Some(c) => format!("the credentials from {} were refused", c.source),
                None => "anonymous access was refused (no credentials found)".to_owned(),
            };
            return Err(AuthError(format!(
                "token service of {registry} answered HTTP {}: {who}",
                status.as_u16()
            )));
        }
        let bytes = super::transport::read_capped(
            &mut resp,
            started,
            deadline,
            super::transport::TOKEN_MAX,
            "token answers",
        )
        .await
        .map_err(|e| AuthError(format!("token service of {registry} ({realm_host}): {e}")))?;
        let body: Value = serde_json::from_slice(&bytes).map_err(|_| {
            AuthError(format!(
                "token service of {registry} answered something that is not JSON"
            ))
        })?;
        let value = body
            .get("token")
            .or_else(|| body.get("access_token"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                AuthError(format!(
                    "token service of {registry} answered without a token"
                ))
            })?
            .to_owned();
        // Distribution's default is 60 s; renew a little early so a request never races expiry.
        let ttl = body
            .get("expires_in")
            .and_then(Value::as_u64)
            .unwrap_or(60)
            .clamp(10, 3600);
        tracing::debug!("token for {registry} scope {:?} valid {ttl}s", scope.0);
        Ok(Token {
            value,
            expires: Instant::now() + Duration::from_secs(ttl.saturating_sub(5)),
        })
    }
}

#[cfg(test)]
mod tests;
