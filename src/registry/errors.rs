//! What a failed registry call says, and the retry policy for transient failures.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;

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
    pub(crate) fn new(
        op: &'static str,
        what: &str,
        detail: impl Into<String>,
        status: Option<u16>,
    ) -> Self {
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
    pub(crate) fn backoff(&self, n: u32) -> Duration {
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
pub(crate) fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504)
}

/// `Retry-After` in seconds (the HTTP-date form is treated as "soon").
pub(crate) fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let v = h.get(RETRY_AFTER)?.to_str().ok()?;
    Some(Duration::from_secs(
        v.trim().parse::<u64>().unwrap_or(1).min(60),
    ))
}

/// The registry's own error message, shortened, from a JSON error envelope or the body text.
pub(crate) fn registry_message(body: &[u8]) -> String {
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
