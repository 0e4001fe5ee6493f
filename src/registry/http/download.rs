//! A blob download as a stream: verified and bounded as the bytes pass, and resumed where the
//! connection broke.

use std::time::Instant;

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::OwnedSemaphorePermit;

use super::blobs::{get_from, FETCH};
use crate::media::Descriptor;
use crate::registry::body::{Answer, Cut};
use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;
use crate::registry::store::Tally;
use crate::registry::transport::Transport;

/// Streams a blob, verified and bounded: its sha256 and size are checked as the bytes pass,
/// the stream ends with an error as soon as the registry sends more than the descriptor's
/// size (never reading past it), and each read is under the idle timeout and the request's
/// deadline. A connection that breaks mid-blob is resumed with a range request (or re-read
/// from the start where ranges are not supported), within the retry policy; a stall is not
/// retried. `permit` is a request slot the caller already holds.
pub(crate) fn chunks(
    t: &Transport,
    repo: &Repo,
    desc: &Descriptor,
    permit: Option<OwnedSemaphorePermit>,
) -> impl Stream<Item = Result<Bytes, Error>> + Send + 'static {
    let mut download = Download::rest(t, repo, desc, Tally::new(), None);
    download.permit = permit;
    futures_util::stream::unfold(download, |mut d| async move {
        let item = d.next().await?;
        Some((item, d))
    })
}

/// One download's state between chunks.
pub(super) struct Download {
    t: Transport,
    repo: Repo,
    desc: Descriptor,
    what: String,
    /// Bytes still to drop from the answer (a registry that ignored the range).
    skip: u64,
    body: Option<Answer>,
    permit: Option<OwnedSemaphorePermit>,
    failures: u32,
    /// When the last byte arrived: the retry budget counts time without progress, so a
    /// long download that breaks late still resumes.
    progress: Instant,
    done: bool,
    /// The bytes passed on so far (the offset to resume from) and their hash.
    tally: Tally,
    /// An answer already open on the whole blob, read before any new request.
    opened: Option<Answer>,
}

type Item = Option<Result<Bytes, Error>>;

impl Download {
    /// The rest of a blob as one stream, after the `tally.bytes` bytes already passed on (and
    /// hashed in `tally`); `opened`, when given, is a GET already answered with the whole blob
    /// (only from offset 0), read instead of a new request.
    pub(super) fn rest(
        t: &Transport,
        repo: &Repo,
        desc: &Descriptor,
        tally: Tally,
        opened: Option<Answer>,
    ) -> Self {
        // A whole-blob answer is of use only where nothing was passed on yet.
        let opened = opened.filter(|_| tally.bytes == 0);
        Download {
            t: t.clone(),
            repo: repo.clone(),
            desc: desc.clone(),
            what: format!("{repo}@{}", desc.digest),
            skip: 0,
            body: None,
            permit: None,
            failures: 0,
            progress: Instant::now(),
            done: false,
            tally,
            opened,
        }
    }

    /// The next chunk; `None` once the blob is complete and verified, or after an error.
    pub(super) async fn next(&mut self) -> Item {
        loop {
            if self.done {
                return None;
            }
            if self.body.is_none() {
                if let Some(stop) = self.open().await {
                    return stop;
                }
            }
            let Some(body) = self.body.as_mut() else {
                continue;
            };
            match body.chunk().await {
                Ok(Some(chunk)) => {
                    if let Some(item) = self.pass(chunk) {
                        return item;
                    }
                }
                Err(cut) if !cut.retryable() => return self.fail(cut.kind(), cut.to_string()),
                Err(cut) => {
                    if let Some(stop) = self.broke(cut).await {
                        return stop;
                    }
                }
                Ok(None) => {
                    if let Some(end) = self.ended() {
                        return end;
                    }
                }
            }
        }
    }

    /// Ends the stream with an error, giving the request slot back at once.
    fn fail(&mut self, kind: ErrorKind, detail: String) -> Item {
        self.stop(Error::new(kind, FETCH, &self.what, detail))
    }

    fn stop(&mut self, e: Error) -> Item {
        self.done = true;
        self.body = None;
        self.permit = None;
        Some(Err(e))
    }

    /// GETs the rest of the blob; `Some` when that ends the stream.
    async fn open(&mut self) -> Option<Item> {
        let offset = self.tally.bytes;
        let permit = self.permit.take();
        let got = match self.opened.take() {
            Some(answer) => Ok((answer, 0)),
            None => get_from(&self.t, &self.repo, &self.desc, offset, permit).await,
        };
        match got {
            Ok((resp, skip)) => {
                let left = self.desc.size - offset + skip;
                if let Some(n) = resp.resp.content_length().filter(|n| *n > left) {
                    return Some(self.fail(ErrorKind::Integrity, format!("the registry announces {n} bytes, more than the {left} the descriptor leaves to read; refusing to read them")));
                }
                self.skip = skip;
                self.body = Some(resp);
                None
            }
            Err(e) => Some(self.stop(e)),
        }
    }

    /// Passes a chunk on, after the bytes to skip; `None` when nothing is left of it.
    fn pass(&mut self, mut chunk: Bytes) -> Option<Item> {
        if self.skip > 0 {
            let n = (self.skip as usize).min(chunk.len());
            chunk = chunk.slice(n..);
            self.skip -= n as u64;
            if chunk.is_empty() {
                return None;
            }
        }
        let size = self.desc.size;
        if !self.tally.add(&chunk, Some(size)) {
            return Some(self.fail(
                ErrorKind::Integrity,
                format!(
                    "the registry sent more than the {size} bytes the descriptor gives; stopped reading"
                ),
            ));
        }
        self.progress = Instant::now();
        Some(Some(Ok(chunk)))
    }

    /// The connection broke: resume after a pause, or end the stream when the policy allows
    /// no more (`Some`).
    async fn broke(&mut self, cut: Cut) -> Option<Item> {
        self.failures += 1;
        self.permit = self.body.take().map(|a| a.permit);
        let retry = self.t.retry();
        let wait = retry.backoff(self.failures);
        let offset = self.tally.bytes;
        if self.failures >= retry.attempts || self.progress.elapsed() + wait > retry.budget {
            let detail = format!(
                "broken after {offset} bytes, {} times ({cut})",
                self.failures
            );
            return Some(self.fail(ErrorKind::Transport, detail));
        }
        tracing::warn!(
            "{FETCH} {}: connection broke after {offset} bytes ({cut}); resuming in {:.1}s",
            self.what,
            wait.as_secs_f64()
        );
        tokio::time::sleep(wait).await;
        None
    }

    /// The body ended: resume when it ended early (within the policy), else verify the whole
    /// blob and end the stream (`Some`).
    fn ended(&mut self) -> Option<Item> {
        self.permit = self.body.take().map(|a| a.permit);
        let retry = self.t.retry();
        let (offset, size) = (self.tally.bytes, self.desc.size);
        if offset < size
            && self.failures + 1 < retry.attempts
            && self.progress.elapsed() < retry.budget
        {
            // A clean close before the end: resume like a broken connection.
            self.failures += 1;
            tracing::warn!(
                "{FETCH} {}: body ended after {offset} of {size} bytes; resuming",
                self.what,
            );
            return None;
        }
        if let Some(actual) = self.tally.mismatch(&self.desc.digest, Some(size)) {
            let detail = format!(
                "digest mismatch: the registry served {offset} bytes (the manifest says {size}) whose digest is {actual}"
            );
            return Some(self.fail(ErrorKind::Integrity, detail));
        }
        // Dropping the state gives the request slot back.
        Some(None)
    }
}
