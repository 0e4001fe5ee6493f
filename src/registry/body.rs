//! Bounded reads of an HTTP answer's body, the layer both authentication and the transport
//! stand on.
//!
//! A registry is not trusted to end what it starts: every body is read chunk by chunk under an
//! idle timeout (no byte for N seconds) and a deadline that grows with the expected size, and
//! is cut at a cap. Error bodies are read only for the registry's message and error codes.

use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use tokio::sync::OwnedSemaphorePermit;

use super::error::{Cause, Error, ErrorKind};
use super::settings::Limits;

/// Error bodies are read only for their message.
const ERROR_BODY_MAX: u64 = 64 * 1024;

/// Why a body read stopped early.
#[derive(Debug)]
pub(crate) enum Cut {
    /// No byte for the idle timeout: not retried (a silent registry rarely comes back soon).
    Idle(Duration),
    /// The request's deadline passed: not retried.
    Deadline(Duration),
    /// The connection broke: worth a retry or a resume.
    Broken(String),
    /// The body is over its cap (the text says which and how).
    Over(String),
}

impl Cut {
    pub fn retryable(&self) -> bool {
        matches!(self, Cut::Broken(_))
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            Cut::Idle(_) | Cut::Deadline(_) => ErrorKind::Timeout,
            Cut::Broken(_) => ErrorKind::Transport,
            Cut::Over(_) => ErrorKind::TooLarge,
        }
    }

    /// The failure of the operation `op` on `what` this cut ended.
    pub fn during(&self, op: &'static str, what: &str) -> Error {
        Error::new(self.kind(), op, what, self.to_string())
    }

    /// As a cause, with `before` ahead of the text.
    pub fn cause(&self, before: &str) -> Cause {
        Cause::new(self.kind(), format!("{before}{self}"))
    }
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::Idle(d) => write!(
                f,
                "no byte arrived for {} s (idle timeout, --idle-timeout)",
                d.as_secs()
            ),
            Cut::Deadline(d) => write!(
                f,
                "the answer did not finish within its {:.0} s deadline (--request-timeout plus its size at --min-rate)",
                d.as_secs_f64()
            ),
            Cut::Broken(why) | Cut::Over(why) => f.write_str(why),
        }
    }
}

/// The time bounds of one answer: when it started, its deadline and the idle timeout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub started: Instant,
    pub deadline: Duration,
    pub idle: Duration,
}

impl Window {
    /// How long the next wait may be, and what ends it: the idle timeout, or the deadline when
    /// that comes first.
    fn next_wait(&self) -> (Duration, Cut) {
        let left = self.deadline.saturating_sub(self.started.elapsed());
        if left <= self.idle {
            (left, Cut::Deadline(self.deadline))
        } else {
            (self.idle, Cut::Idle(self.idle))
        }
    }
}

/// Reads the next chunk of a response within the idle timeout and the deadline.
pub(crate) async fn next_chunk(
    resp: &mut reqwest::Response,
    window: &Window,
) -> Result<Option<Bytes>, Cut> {
    let (wait, cut) = window.next_wait();
    match tokio::time::timeout(wait, resp.chunk()).await {
        Err(_) => Err(cut),
        Ok(Err(e)) => Err(if e.is_timeout() {
            cut
        } else {
            Cut::Broken(describe(&e))
        }),
        Ok(Ok(c)) => Ok(c),
    }
}

/// Reads a whole body of at most `max` bytes within the time bounds; `what` names the cap.
pub(crate) async fn read_capped(
    resp: &mut reqwest::Response,
    window: &Window,
    max: u64,
    what: &str,
) -> Result<Vec<u8>, Cut> {
    if let Some(n) = resp.content_length().filter(|n| *n > max) {
        return Err(Cut::Over(format!(
            "the answer announces {n} bytes, over the {max} byte limit for {what}"
        )));
    }
    let mut out = Vec::new();
    while let Some(c) = next_chunk(resp, window).await? {
        if out.len() as u64 + c.len() as u64 > max {
            return Err(Cut::Over(format!(
                "the answer is over the {max} byte limit for {what}; stopped reading"
            )));
        }
        out.extend_from_slice(&c);
    }
    Ok(out)
}

/// A transport failure in a few words, with the innermost cause (reqwest's own message repeats
/// the URL, which the caller already names).
pub(crate) fn describe(e: &reqwest::Error) -> String {
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
    let inner = inner.to_string();
    if inner.is_empty() || inner == what {
        what.to_owned()
    } else {
        format!("{what}: {inner}")
    }
}

/// The kind of a failed request: a timeout or a connection failure.
pub(crate) fn kind_of(e: &reqwest::Error) -> ErrorKind {
    if e.is_timeout() && !e.is_connect() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Transport
    }
}

/// What a registry's error body says: its message (shortened) and its error codes.
#[derive(Debug, Default)]
pub(crate) struct Envelope {
    pub message: String,
    pub codes: Vec<String>,
}

impl Envelope {
    /// From a JSON error envelope (`{"errors": [{"code", "message"}]}`) or the body text.
    pub fn parse(body: &[u8]) -> Self {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
            if let Some(errs) = v.get("errors").and_then(|e| e.as_array()) {
                let field = |e: &serde_json::Value, k: &str| {
                    e.get(k).and_then(|c| c.as_str()).unwrap_or("").to_owned()
                };
                let codes: Vec<String> = errs.iter().map(|e| field(e, "code")).collect();
                let msgs: Vec<String> = errs
                    .iter()
                    .map(|e| {
                        format!("{} {}", field(e, "code"), field(e, "message"))
                            .trim()
                            .to_owned()
                    })
                    .collect();
                return Envelope {
                    message: msgs.join("; "),
                    codes,
                };
            }
        }
        let text: String = String::from_utf8_lossy(body).chars().take(120).collect();
        Envelope {
            message: text.replace(['\n', '\r'], " ").trim().to_owned(),
            codes: Vec::new(),
        }
    }
}

/// A registry's answer, holding its slot among the requests in flight until it is dropped.
pub(crate) struct Answer {
    pub resp: reqwest::Response,
    pub permit: OwnedSemaphorePermit,
    pub window: Window,
    pub limits: Limits,
}

impl Answer {
    pub fn status(&self) -> StatusCode {
        self.resp.status()
    }

    pub fn headers(&self) -> &HeaderMap {
        self.resp.headers()
    }

    /// A header's value as text, trimmed.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_owned())
    }

    /// Narrows the deadline to the size the answer announces, at most `max` bytes (a trickle
    /// of a small document ends soon).
    pub fn expect_announced(&mut self, max: u64) {
        if let Some(n) = self.resp.content_length() {
            let deadline = self.limits.deadline(n.min(max));
            self.window.deadline = self.window.deadline.min(deadline);
        }
    }

    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Cut> {
        next_chunk(&mut self.resp, &self.window).await
    }

    /// The whole body, at most `max` bytes.
    pub async fn body(mut self, max: u64, what: &str) -> Result<Vec<u8>, Cut> {
        read_capped(&mut self.resp, &self.window, max, what).await
    }

    /// The registry's error message and codes from the body, best effort and bounded.
    pub async fn envelope(&mut self) -> Envelope {
        let mut out = Vec::new();
        while let Ok(Some(c)) = self.chunk().await {
            out.extend_from_slice(&c);
            if out.len() as u64 >= ERROR_BODY_MAX {
                break;
            }
        }
        Envelope::parse(&out)
    }

    /// The answer as a failure: its kind and `HTTP <status>: <registry message>`.
    pub async fn failure(&mut self) -> Cause {
        let s = self.status().as_u16();
        let env = self.envelope().await;
        let detail = if env.message.is_empty() {
            format!("HTTP {s}")
        } else {
            format!("HTTP {s}: {}", env.message)
        };
        Cause::new(ErrorKind::of_answer(s, &env.codes), detail)
    }

    /// The answer as the failure of `op` on `what`, with its status.
    pub async fn fail(&mut self, op: &'static str, what: &str) -> Error {
        self.fail_at(op, what, "").await
    }

    /// As [`Answer::fail`], naming the step (`before`, e.g. `"chunk: "`) that failed.
    pub async fn fail_at(&mut self, op: &'static str, what: &str, before: &str) -> Error {
        let s = self.status().as_u16();
        let c = self.failure().await;
        Error::new(c.kind, op, what, format!("{before}{}", c.detail)).with_status(s)
    }
}
