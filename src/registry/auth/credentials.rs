//! Credentials as docker, skopeo and crane find them: the environment, Docker/podman auth
//! files, credential helpers. A [`Credential`] redacts itself.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

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
    pub(super) fn basic_header(&self) -> String {
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
    let limit = crate::registry::transport::limits().helper;
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
pub(super) fn from_file(path: &PathBuf, registry: &str) -> Result<Option<Credential>, String> {
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
