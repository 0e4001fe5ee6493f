//! The retry policy applied: which answers are worth another try, how long to wait, and when
//! to stop.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;

use crate::registry::error::Error;
use crate::registry::settings::Retry;

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

/// Waits before the next attempt, or gives `failure` back when the policy allows no more:
/// `attempt` tries were made; `spent` is the time the retry budget counts (`None`: only the
/// count bounds the retries); `hint` is the registry's `Retry-After`.
pub(crate) async fn pause(
    retry: &Retry,
    attempt: u32,
    hint: Option<Duration>,
    spent: Option<Duration>,
    failure: Error,
) -> Result<(), Error> {
    let wait = hint.unwrap_or_else(|| retry.backoff(attempt));
    if attempt >= retry.attempts || spent.is_some_and(|s| s + wait > retry.budget) {
        return Err(failure);
    }
    tracing::warn!(
        "{failure}; retry {attempt}/{} in {:.1}s",
        retry.attempts - 1,
        wait.as_secs_f64()
    );
    tokio::time::sleep(wait).await;
    Ok(())
}
