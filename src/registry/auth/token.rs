//! Bearer tokens from a registry's token service: one bounded request per scope, its answer
//! read under the same idle timeout, deadline and cap as every registry answer.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::challenge::Scope;
use super::credentials::Credential;
use crate::registry::body::{describe, kind_of, read_capped, Window};
use crate::registry::error::{Cause, ErrorKind};
use crate::registry::settings::Limits;

/// A token answer is small; a bound keeps a hostile one from filling memory.
const TOKEN_MAX: u64 = 1024 * 1024;

/// A token and when to stop using it.
pub(crate) struct Token {
    pub value: String,
    pub expires: Instant,
}

/// Where a token is asked for: the registry's name (for messages), the challenge's realm and
/// service, and the credentials to send (none: anonymous).
pub(crate) struct TokenService<'a> {
    pub registry: &'a str,
    pub realm: &'a str,
    pub service: Option<&'a str>,
    pub credential: Option<&'a Credential>,
}

impl TokenService<'_> {
    /// Asks the token service for a token with `scope`, within the run's bounds.
    pub async fn fetch(
        &self,
        http: &reqwest::Client,
        limits: &Limits,
        scope: &Scope,
    ) -> Result<Token, Cause> {
        let registry = self.registry;
        let mut query: Vec<(&str, &str)> = Vec::new();
        if let Some(s) = self.service {
            query.push(("service", s));
        }
        for s in &scope.0 {
            query.push(("scope", s.as_str()));
        }
        let mut req = http.get(self.realm).query(&query);
        if let Some(c) = self.credential {
            req = req.header(reqwest::header::AUTHORIZATION, c.basic_header());
        }
        let realm_host = reqwest::Url::parse(self.realm)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_default();
        let window = Window {
            started: Instant::now(),
            deadline: limits.deadline(TOKEN_MAX),
            idle: limits.idle,
        };
        let sent = tokio::time::timeout(limits.idle, req.timeout(window.deadline).send()).await;
        let mut resp = match sent {
            Err(_) => {
                return Err(Cause::new(ErrorKind::Timeout, format!(
                    "token service of {registry} ({realm_host}) did not answer within {} s (--idle-timeout)",
                    limits.idle.as_secs()
                )))
            }
            Ok(Err(e)) => {
                return Err(Cause::new(
                    kind_of(&e),
                    format!(
                        "token service of {registry} ({realm_host}) unreachable: {}",
                        describe(&e)
                    ),
                ))
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if !status.is_success() {
            let who = match self.credential {
                Some(c) => format!("the credentials from {} were refused", c.source),
                None => "anonymous access was refused (no credentials found)".to_owned(),
            };
            return Err(Cause::new(
                ErrorKind::Unauthorized,
                format!(
                    "token service of {registry} answered HTTP {}: {who}",
                    status.as_u16()
                ),
            ));
        }
        let bytes = read_capped(&mut resp, &window, TOKEN_MAX, "token answers")
            .await
            .map_err(|c| c.cause(&format!("token service of {registry} ({realm_host}): ")))?;
        self.token(&bytes, scope)
    }

    /// The token in a token service's answer, valid for what it says (within bounds).
    fn token(&self, bytes: &[u8], scope: &Scope) -> Result<Token, Cause> {
        let registry = self.registry;
        let protocol = |what: &str| {
            Cause::new(
                ErrorKind::Protocol,
                format!("token service of {registry} answered {what}"),
            )
        };
        let body: Value =
            serde_json::from_slice(bytes).map_err(|_| protocol("something that is not JSON"))?;
        let value = body
            .get("token")
            .or_else(|| body.get("access_token"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| protocol("without a token"))?
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
