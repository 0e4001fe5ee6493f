//! Registry authentication as docker, skopeo and crane users expect it: credentials from the
//! environment or Docker/podman auth files (with credential helpers), Basic auth where the
//! registry asks for it, and Bearer tokens from the registry's token service, cached per scope
//! until they expire and fetched again when the registry rejects them mid-run.
//!
//! Secrets never reach a log line or an error message: [`Credential`] redacts itself, and tokens
//! are only ever put into an `Authorization` header.

use std::collections::HashMap;
use std::time::Instant;

use tokio::sync::Mutex;

mod challenge;
mod credentials;
mod helper;
mod token;

pub(crate) use challenge::Scope;
pub(crate) use credentials::Credential;

use super::error::{Cause, ErrorKind};
use super::settings::Limits;
use challenge::{parse_challenge, Challenge};
use credentials::lookup;
use token::{Token, TokenService};

/// Per-run authentication state, shared by all requests.
pub(crate) struct Auth {
    http: reqwest::Client,
    limits: Limits,
    /// Per registry: its credentials, or why they could not be read (a helper that hung is
    /// not asked again by every request).
    creds: Mutex<HashMap<String, Result<Option<Credential>, Cause>>>,
    challenges: Mutex<HashMap<String, Challenge>>,
    tokens: Mutex<HashMap<(String, Scope), Token>>,
}

impl Auth {
    /// Authentication over `http`, its token requests and credential helpers within `limits`.
    pub fn new(http: reqwest::Client, limits: Limits) -> Self {
        Auth {
            http,
            limits,
            creds: Mutex::default(),
            challenges: Mutex::default(),
            tokens: Mutex::default(),
        }
    }

    async fn credential(&self, registry: &str) -> Result<Option<Credential>, Cause> {
        let mut creds = self.creds.lock().await;
        if let Some(c) = creds.get(registry) {
            return c.clone();
        }
        // Auth files and helpers are read off the async workers: a helper may take seconds.
        let name = registry.to_owned();
        let helper_limit = self.limits.helper;
        let c = tokio::task::spawn_blocking(move || lookup(&name, helper_limit))
            .await
            .map_err(|e| {
                Cause::new(
                    ErrorKind::Credentials,
                    format!("looking up credentials for {registry} failed ({e})"),
                )
            })?;
        match &c {
            Ok(Some(c)) => tracing::debug!("credentials for {registry} from {}", c.source),
            Ok(None) => tracing::debug!("no credentials for {registry}; anonymous"),
            Err(_) => {}
        }
        creds.insert(registry.to_owned(), c.clone());
        c
    }

    /// The `Authorization` header for a request, when the registry has asked for one before.
    pub async fn header(
        &self,
        registry: &str,
        endpoint: &str,
        scope: &Scope,
    ) -> Result<Option<String>, Cause> {
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
                let credential = self.credential(registry).await?;
                let service = TokenService {
                    registry,
                    realm: &realm,
                    service: service.as_deref(),
                    credential: credential.as_ref(),
                };
                let token = service.fetch(&self.http, &self.limits, scope).await?;
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
}

#[cfg(test)]
mod tests;
