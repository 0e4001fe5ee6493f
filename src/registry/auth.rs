//! Registry authentication as docker, skopeo and crane users expect it: credentials from the
//! environment or Docker/podman auth files (with credential helpers), Basic auth where the
//! registry asks for it, and Bearer tokens from the registry's token service, cached per scope
//! until they expire and fetched again when the registry rejects them mid-run.
//!
//! Secrets never reach a log line or an error message: [`Credential`] redacts itself, and tokens
//! are only ever put into an `Authorization` header.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;
use tokio::sync::Mutex;

/// A username and a secret (password or token). `Debug` never shows the secret.
#[derive(Clone)]
pub struct Credential {
    pub username: String,
    pub secret: String,
    /// Where it came from, for messages (a file path or an environment variable name).
    pub source: String,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Credential({} from {}, secret redacted)",
            self.username, self.source
        )
    }
}

impl Credential {
    fn basic_header(&self) -> String {
        let raw = format!("{}:{}", self.username, self.secret);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }
}

/// The keys under which Docker and podman file credentials for `registry`.
fn config_keys(registry: &str) -> Vec<String> {
    if matches!(
        registry,
        "docker.io" | "index.docker.io" | "registry-1.docker.io"
    ) {
        return [
            "https://index.docker.io/v1/",
            "index.docker.io",
            "docker.io",
            "registry-1.docker.io",
            "https://registry-1.docker.io",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    }
    vec![
        registry.to_owned(),
        format!("https://{registry}"),
        format!("http://{registry}"),
        format!("https://{registry}/v1/"),
        format!("https://{registry}/v2/"),
    ]
}

/// The auth files to read, in order: podman's `REGISTRY_AUTH_FILE`, Docker's config
/// (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`), podman's runtime auth file.
fn auth_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("REGISTRY_AUTH_FILE") {
        out.push(PathBuf::from(p));
    }
    match std::env::var_os("DOCKER_CONFIG") {
        Some(d) => out.push(PathBuf::from(d).join("config.json")),
        None => {
            if let Some(h) = std::env::var_os("HOME") {
                out.push(PathBuf::from(h).join(".docker/config.json"));
            }
        }
    }
    if let Some(r) = std::env::var_os("XDG_RUNTIME_DIR") {
        out.push(PathBuf::from(r).join("containers/auth.json"));
    }
    out
}

/// Runs `docker-credential-<helper> get` as Docker does (the server URL on stdin), killing it
/// when it does not answer within the helper timeout (a helper waiting on a locked keychain
/// or a prompt would otherwise hang the run).
fn from_helper(helper: &str, key: &str) -> Result<Option<Credential>, String> {
    use std::io::{Read, Write};
    let program = format!("docker-credential-{helper}");
    let limit = super::transport::limits().helper;
    let mut child = std::process::Command::new(&program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("credential helper {program} cannot run ({e})"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(key.as_bytes());
    }
    // Read its answer on a thread, so a helper that never closes stdout cannot block us.
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(mut stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = stdout.by_ref().take(1024 * 1024).read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    }
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "credential helper {program} did not answer within {} s and was stopped (--helper-timeout sets the limit)",
                    limit.as_secs()
                ));
            }
            Err(e) => {
                return Err(format!(
                    "credential helper {program} cannot be waited for ({e})"
                ))
            }
        }
    };
    if !status.success() {
        // Helpers answer "credentials not found in native keychain" with a failure status.
        return Ok(None);
    }
    let stdout = rx
        .recv_timeout(
            limit
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(100)),
        )
        .map_err(|_| format!("credential helper {program} exited but left its output open"))?;
    let v: Value = serde_json::from_slice(&stdout)
        .map_err(|_| format!("credential helper {program} printed something that is not JSON"))?;
    let username = v
        .get("Username")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let secret = v
        .get("Secret")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if username == "<token>" {
        return Err(format!("credential helper {program} holds an identity token for {key}; OAuth identity tokens are not supported, log in with a password or access token"));
    }
    if secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(Credential {
        username,
        secret,
        source: format!("credential helper {program}"),
    }))
}

/// Reads one auth file for `registry`.
fn from_file(path: &PathBuf, registry: &str) -> Result<Option<Credential>, String> {
    let Ok(bytes) = std::fs::read(path) else {
        return Ok(None);
    };
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("auth file {} is not valid JSON: {e}", path.display()))?;
    let keys = config_keys(registry);
    if let Some(helpers) = v.get("credHelpers").and_then(Value::as_object) {
        for k in &keys {
            if let Some(h) = helpers.get(k).and_then(Value::as_str) {
                return from_helper(h, k);
            }
        }
    }
    if let Some(auths) = v.get("auths").and_then(Value::as_object) {
        for k in &keys {
            let Some(entry) = auths.get(k) else { continue };
            if entry
                .get("identitytoken")
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty())
            {
                return Err(format!("auth file {} holds an identity token for {k}; OAuth identity tokens are not supported", path.display()));
            }
            if let Some(a) = entry
                .get("auth")
                .and_then(Value::as_str)
                .filter(|a| !a.is_empty())
            {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(a.trim())
                    .map_err(|_| {
                        format!(
                            "auth file {}: the auth of {k} is not base64",
                            path.display()
                        )
                    })?;
                let text = String::from_utf8(decoded).map_err(|_| {
                    format!("auth file {}: the auth of {k} is not UTF-8", path.display())
                })?;
                let (u, p) = text.split_once(':').ok_or_else(|| {
                    format!(
                        "auth file {}: the auth of {k} is not user:password",
                        path.display()
                    )
                })?;
                return Ok(Some(Credential {
                    username: u.to_owned(),
                    secret: p.to_owned(),
                    source: path.display().to_string(),
                }));
            }
            let u = entry.get("username").and_then(Value::as_str);
            let p = entry.get("password").and_then(Value::as_str);
            if let (Some(u), Some(p)) = (u, p) {
                return Ok(Some(Credential {
                    username: u.to_owned(),
                    secret: p.to_owned(),
                    source: path.display().to_string(),
                }));
            }
        }
    }
    if let Some(store) = v
        .get("credsStore")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        for k in &keys {
            if let Some(c) = from_helper(store, k)? {
                return Ok(Some(c));
            }
        }
    }
    Ok(None)
}

/// Finds credentials for a registry: `RUNNER_PATCH_USERNAME`/`RUNNER_PATCH_PASSWORD` (for CI;
/// limited to `RUNNER_PATCH_REGISTRY` when that is set), then the auth files.
pub fn lookup(registry: &str) -> Result<Option<Credential>, String> {
    if let (Ok(u), Ok(p)) = (
        std::env::var("RUNNER_PATCH_USERNAME"),
        std::env::var("RUNNER_PATCH_PASSWORD"),
    ) {
        let scoped = std::env::var("RUNNER_PATCH_REGISTRY")
            .ok()
            .filter(|r| !r.is_empty());
        if !u.is_empty() && scoped.as_deref().is_none_or(|r| r == registry) {
            return Ok(Some(Credential {
                username: u,
                secret: p,
                source: "RUNNER_PATCH_USERNAME/RUNNER_PATCH_PASSWORD".into(),
            }));
        }
    }
    for f in auth_files() {
        if let Some(c) = from_file(&f, registry)? {
            return Ok(Some(c));
        }
    }
    Ok(None)
}

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
mod tests {
    use super::*;

    #[tokio::test]
    async fn concurrent_anonymous_requests_each_retry_after_one_learned_the_challenge() {
        let auth = Auth::new(reqwest::Client::new());
        let scope = Scope(vec!["repository:a/b:pull".into()]);
        let basic = Some(r#"Basic realm="x""#);
        assert!(auth.rejected("r:1", &scope, basic, false).await);
        assert!(auth.rejected("r:1", &scope, basic, false).await);
    }

    #[test]
    fn challenges_parse() {
        assert_eq!(
            parse_challenge(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into())
            })
        );
        assert_eq!(
            parse_challenge(r#"Basic realm="x""#),
            Some(Challenge::Basic)
        );
        assert_eq!(parse_challenge("Negotiate"), None);
    }

    #[test]
    fn credentials_from_docker_config_never_debug_print_the_secret() {
        let dir = std::env::temp_dir().join(format!("rp-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("config.json");
        let auth = base64::engine::general_purpose::STANDARD.encode("bob:s3cret");
        std::fs::write(&path, format!(r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{auth}"}},"127.0.0.1:5000":{{"username":"u","password":"p"}}}}}}"#)).expect("write");
        let hub = from_file(&path, "docker.io").expect("read").expect("found");
        assert_eq!(
            (hub.username.as_str(), hub.secret.as_str()),
            ("bob", "s3cret")
        );
        assert!(!format!("{hub:?}").contains("s3cret"));
        let local = from_file(&path, "127.0.0.1:5000")
            .expect("read")
            .expect("found");
        assert_eq!(local.username, "u");
        assert!(from_file(&path, "quay.io").expect("read").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
