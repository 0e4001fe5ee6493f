//! Credentials as docker, skopeo and crane find them: the environment, Docker/podman auth
//! files, credential helpers. A [`Credential`] redacts itself.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use super::helper::{self, unreadable};
use crate::registry::error::Cause;

/// A username and a secret (password or token). `Debug` never shows the secret.
#[derive(Clone)]
pub(crate) struct Credential {
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
    pub(crate) fn basic_header(&self) -> String {
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

/// The credential `docker-credential-<helper>` holds for `key`.
fn from_helper(helper: &str, key: &str, limit: Duration) -> Result<Option<Credential>, Cause> {
    let program = format!("docker-credential-{helper}");
    Ok(
        helper::from_helper(&program, key, limit)?.map(|(username, secret)| Credential {
            username,
            secret,
            source: format!("credential helper {program}"),
        }),
    )
}

/// Reads one auth file for `registry`.
pub(super) fn from_file(
    path: &Path,
    registry: &str,
    helper_limit: Duration,
) -> Result<Option<Credential>, Cause> {
    let Ok(bytes) = std::fs::read(path) else {
        return Ok(None);
    };
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
        unreadable(format!(
            "auth file {} is not valid JSON: {e}",
            path.display()
        ))
    })?;
    let keys = config_keys(registry);
    if let Some(helpers) = v.get("credHelpers").and_then(Value::as_object) {
        for k in &keys {
            if let Some(h) = helpers.get(k).and_then(Value::as_str) {
                return from_helper(h, k, helper_limit);
            }
        }
    }
    if let Some(auths) = v.get("auths").and_then(Value::as_object) {
        for k in &keys {
            if let Some(entry) = auths.get(k) {
                if let Some(c) = from_entry(path, k, entry)? {
                    return Ok(Some(c));
                }
            }
        }
    }
    if let Some(store) = v
        .get("credsStore")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        for k in &keys {
            if let Some(c) = from_helper(store, k, helper_limit)? {
                return Ok(Some(c));
            }
        }
    }
    Ok(None)
}

/// The credential of one `auths` entry (`auth`, or `username` and `password`), if it has one.
fn from_entry(path: &Path, k: &str, entry: &Value) -> Result<Option<Credential>, Cause> {
    let bad_auth = |what: &str| {
        unreadable(format!(
            "auth file {}: the auth of {k} is not {what}",
            path.display()
        ))
    };
    if entry
        .get("identitytoken")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty())
    {
        return Err(unreadable(format!(
            "auth file {} holds an identity token for {k}; OAuth identity tokens are not supported",
            path.display()
        )));
    }
    let text = |k: &str| entry.get(k).and_then(Value::as_str);
    let (username, secret) = match text("auth").filter(|a| !a.is_empty()) {
        Some(a) => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(a.trim())
                .map_err(|_| bad_auth("base64"))?;
            let text = String::from_utf8(decoded).map_err(|_| bad_auth("UTF-8"))?;
            let (u, p) = text
                .split_once(':')
                .ok_or_else(|| bad_auth("user:password"))?;
            (u.to_owned(), p.to_owned())
        }
        None => match (text("username"), text("password")) {
            (Some(u), Some(p)) => (u.to_owned(), p.to_owned()),
            _ => return Ok(None),
        },
    };
    Ok(Some(Credential {
        username,
        secret,
        source: path.display().to_string(),
    }))
}

/// Finds credentials for a registry: `RUNNER_PATCH_USERNAME`/`RUNNER_PATCH_PASSWORD` (for CI;
/// limited to `RUNNER_PATCH_REGISTRY` when that is set), then the auth files.
pub(super) fn lookup(registry: &str, helper_limit: Duration) -> Result<Option<Credential>, Cause> {
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
        if let Some(c) = from_file(&f, registry, helper_limit)? {
            return Ok(Some(c));
        }
    }
    Ok(None)
}
