//! Sending one request: authorize it, send it within the run's bounds, re-authenticate once
//! the registry says how, and retry what is worth retrying. Answers other than those are the
//! caller's to judge, with their body unread.

use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, AUTHORIZATION, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};
use tokio::sync::OwnedSemaphorePermit;

use super::call::{Body, Call};
use super::retry::{pause, retry_after, retryable};
use super::Transport;
use crate::registry::auth::Scope;
use crate::registry::body::{describe, Answer, Cut};
use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;

/// The parts of a request that every attempt repeats.
struct Request<'a> {
    op: &'static str,
    what: &'a str,
    repo: &'a Repo,
    scope: Scope,
    method: Method,
    url: &'a str,
    headers: HeaderMap,
    body: Body,
    deadline: Duration,
    /// Whether the URL is on the registry's own origin (credentials go only there).
    own: bool,
}

/// What an answer leads to.
enum Next {
    /// The caller's to judge.
    Done(Answer),
    /// Authenticate afresh and send again.
    Again(OwnedSemaphorePermit),
    /// A transient failure: retry after the registry's `Retry-After`, if it gave one.
    Retry(OwnedSemaphorePermit, Option<Duration>, Error),
}

impl Transport {
    /// Sends one request with authentication and retries, within the run's bounds.
    pub(crate) async fn send(
        &self,
        call: Call<'_>,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Body,
    ) -> Result<Answer, Error> {
        let Call {
            op,
            what,
            repo,
            scope,
            permit,
            bytes,
        } = call;
        let mut permit = match permit {
            Some(p) => p,
            None => self.slot().await,
        };
        let req = Request {
            deadline: self.limits().deadline(bytes.max(body.len())),
            own: self.is_own(repo, url),
            op,
            what,
            repo,
            scope,
            method,
            url,
            headers,
            body,
        };
        let retry = self.retry();
        let started = Instant::now();
        let mut auth_tries = 0;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let authz = self
                .authorization(repo, url, &req.scope)
                .await
                .map_err(|c| c.during(op, what))?;
            let sent_at = Instant::now();
            let (hint, failure) = match self.exchange(&req, authz.as_deref()).await? {
                Ok(resp) => {
                    let answer = self.answer(resp, permit, sent_at, req.deadline);
                    match self
                        .judge(&req, answer, authz.as_deref(), &mut auth_tries)
                        .await?
                    {
                        Next::Done(answer) => return Ok(answer),
                        Next::Again(p) => {
                            permit = p;
                            continue;
                        }
                        Next::Retry(p, hint, failure) => {
                            permit = p;
                            (hint, failure)
                        }
                    }
                }
                Err(e) => {
                    // The backstop deadline; a connect timeout is a connection error, retried.
                    if e.is_timeout() && !e.is_connect() {
                        return Err(Cut::Deadline(req.deadline).during(op, what));
                    }
                    (
                        None,
                        Error::new(ErrorKind::Transport, op, what, describe(&e)),
                    )
                }
            };
            pause(&retry, attempt, hint, Some(started.elapsed()), failure).await?;
        }
    }

    /// One attempt: the request sent and its status line awaited within the idle timeout (or
    /// the deadline, while uploading or when that comes first).
    async fn exchange(
        &self,
        req: &Request<'_>,
        authz: Option<&str>,
    ) -> Result<Result<reqwest::Response, reqwest::Error>, Error> {
        let mut rb = self
            .http()
            .request(req.method.clone(), req.url)
            .headers(req.headers.clone())
            // A backstop; the bounded reads give the clearer error first.
            .timeout(req.deadline + Duration::from_secs(1));
        if let Some(a) = authz {
            rb = rb.header(AUTHORIZATION, a);
        }
        let uploads = match &req.body {
            Body::Empty => false,
            Body::Bytes(b) => {
                rb = rb.body(b.clone());
                true
            }
        };
        let idle = self.limits().idle;
        let (wait, cut) = if uploads || req.deadline <= idle {
            (req.deadline, Cut::Deadline(req.deadline))
        } else {
            (idle, Cut::Idle(idle))
        };
        tokio::time::timeout(wait, rb.send())
            .await
            .map_err(|_| cut.during(req.op, req.what))
    }

    /// Judges an answer: authentication first, then the retry policy.
    async fn judge(
        &self,
        req: &Request<'_>,
        mut answer: Answer,
        authz: Option<&str>,
        auth_tries: &mut u32,
    ) -> Result<Next, Error> {
        let status = answer.status();
        if status == StatusCode::UNAUTHORIZED
            || (status == StatusCode::FORBIDDEN && authz.is_some_and(|a| a.starts_with("Bearer")))
        {
            return self
                .unauthorized(req, answer, authz.is_some(), auth_tries)
                .await;
        }
        if !retryable(status) {
            return Ok(Next::Done(answer));
        }
        let hint = retry_after(answer.headers());
        let failure = answer.fail(req.op, req.what).await;
        Ok(Next::Retry(answer.permit, hint, failure))
    }

    /// A 401 (or a 403 on a token): authenticate afresh at most twice, then fail saying why.
    async fn unauthorized(
        &self,
        req: &Request<'_>,
        mut answer: Answer,
        had_auth: bool,
        auth_tries: &mut u32,
    ) -> Result<Next, Error> {
        let status = answer.status().as_u16();
        let challenge = answer.header(WWW_AUTHENTICATE.as_str());
        if req.own
            && *auth_tries < 2
            && self
                .inner
                .auth
                .rejected(
                    &req.repo.endpoint(),
                    &req.scope,
                    challenge.as_deref(),
                    had_auth,
                )
                .await
        {
            *auth_tries += 1;
            return Ok(Next::Again(answer.permit));
        }
        let hint = if !req.own {
            "answered by a host other than the registry, which gets no credentials"
        } else if had_auth {
            "credentials were rejected"
        } else {
            "authentication required and no credentials found"
        };
        let env = answer.envelope().await;
        let detail = if env.message.is_empty() {
            format!("HTTP {status}: {hint}")
        } else {
            format!("HTTP {status}: {hint} ({})", env.message)
        };
        let kind = ErrorKind::of_answer(status, &env.codes);
        Err(Error::new(kind, req.op, req.what, detail).with_status(status))
    }
}
