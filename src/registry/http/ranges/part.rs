//! One range of a layer: asked for with `Range: bytes=a-b`, its answer checked (206, the exact
//! `Content-Range`, that many bytes), its bytes handed on in order, retried once alone; and
//! where the ranges are sent: the registry, or the location its first answer was redirected
//! to, asked for again when that location expires.

use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderMap, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, RANGE};
use reqwest::{Method, StatusCode};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Mutex;

use super::super::blobs::FETCH;
use crate::media::Descriptor;
use crate::registry::body::Answer;
use crate::registry::error::Error;
use crate::registry::repo::Repo;
use crate::registry::transport::{Body, Call, Transport};

/// Tries of one range before the layer is read as one stream instead.
const TRIES: u32 = 2;

/// The size of the pieces a range's bytes wait in.
const PIECE: usize = 256 * 1024;

/// What a range hands the reader, in order.
pub(super) enum Piece {
    Data(Bytes),
    /// The range is complete: every byte asked for was handed on.
    Done,
    /// The range failed on every try; the text says how, the last time.
    Failed(String),
}

/// What a layer's ranges share: the blob, the transport, and where ranges are sent.
pub(super) struct Layer {
    pub t: Transport,
    pub repo: Repo,
    pub desc: Descriptor,
    pub what: String,
    /// The registry's own URL of the blob.
    pub url: String,
    pub location: Mutex<Location>,
}

/// Where ranges are sent now: the registry's URL, or the location its answer was redirected
/// to (a CDN's signed URL), which gets no credentials.
#[derive(Debug, Clone)]
pub(super) struct Location {
    pub url: String,
    /// Counts the locations used, so that one expiry is answered once.
    pub generation: u64,
    /// Answers this location gave that were right (it worked before it expired).
    pub served: u64,
}

/// Why a try of a range did not complete.
#[derive(Debug)]
pub(super) enum Trouble {
    /// The reader is gone: nothing more to do.
    Gone,
    /// The location answered 401 or 403: a signed URL that expired.
    Expired(String),
    /// Anything else: a wrong answer, a reset, a stall.
    Bad(String),
}

impl Layer {
    pub fn new(t: &Transport, repo: &Repo, desc: &Descriptor) -> Self {
        let url = format!("{}/blobs/{}", t.base(repo), desc.digest);
        Layer {
            t: t.clone(),
            repo: repo.clone(),
            desc: desc.clone(),
            what: format!("{repo}@{}", desc.digest),
            location: Mutex::new(Location {
                url: url.clone(),
                generation: 0,
                served: 0,
            }),
            url,
        }
    }

    /// GETs bytes `from..=to` of the blob at `url` (the registry's own URL gets its
    /// credentials; a redirect is followed without them).
    pub async fn get(&self, url: &str, from: u64, to: u64) -> Result<Answer, Error> {
        let mut h = HeaderMap::new();
        if let Ok(v) = format!("bytes={from}-{to}").parse() {
            h.insert(RANGE, v);
        }
        let call = Call::pull(FETCH, &self.what, &self.repo).moving(to - from + 1);
        self.t.send(call, Method::GET, url, h, Body::Empty).await
    }

    /// Asks the registry for the first range: where it answers from (a redirect is
    /// followed) and whether it serves ranges at all. `Ok` holds the 206 to read; `Err` the
    /// whole-blob answer when the registry ignored the range (HTTP 200), why, and whether a
    /// wrong range answer (worth a warning) was the reason.
    pub async fn probe(&self, to: u64) -> Result<Answer, (Option<Answer>, String, bool)> {
        let answer = match self.get(&self.url, 0, to).await {
            Ok(a) => a,
            Err(e) => return Err((None, e.detail().to_owned(), false)),
        };
        match answer.status() {
            StatusCode::OK => {
                let why = "the registry ignores ranges (HTTP 200)".to_owned();
                return Err((Some(answer), why, false));
            }
            StatusCode::PARTIAL_CONTENT => {}
            s => return Err((None, format!("HTTP {}", s.as_u16()), false)),
        }
        if let Err(why) = judge(answer.status(), answer.headers(), 0, to, self.desc.size) {
            return Err((None, format!("the first range: {why}"), true));
        }
        let mut loc = self.location.lock().await;
        loc.url = answer.resp.url().to_string();
        loc.served = 1;
        if loc.url != self.url {
            tracing::debug!(
                "{FETCH} {}: ranges go where the registry redirected",
                self.what
            );
        }
        Ok(answer)
    }

    /// After an expiry at location `generation`: `Some(answer)` when the registry gave a new
    /// location (its first answer, for `from..=to`), `Some(None)` to try again at a location
    /// another range already renewed, `None` when the expiry counts as a failure (the
    /// location never served a range, or the registry gave none).
    async fn renew(&self, generation: u64, from: u64, to: u64) -> Option<Option<Answer>> {
        let mut loc = self.location.lock().await;
        if loc.generation != generation {
            return Some(None);
        }
        if loc.served == 0 {
            return None;
        }
        let answer = self.get(&self.url, from, to).await.ok()?;
        loc.url = answer.resp.url().to_string();
        loc.generation += 1;
        loc.served = 0;
        tracing::debug!(
            "{FETCH} {}: the signed location expired; renewed",
            self.what
        );
        Some(Some(answer))
    }

    async fn current(&self) -> Location {
        self.location.lock().await.clone()
    }
}

/// Checks a range answer before its body is read: 206, a single range (no multipart), a
/// `Content-Range` of exactly `from-to` of a blob of `size` bytes, and a `Content-Length`
/// (where given) of that many bytes. `Err` says what was wrong.
pub(super) fn judge(
    status: StatusCode,
    headers: &HeaderMap,
    from: u64,
    to: u64,
    size: u64,
) -> Result<(), String> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    match status {
        StatusCode::PARTIAL_CONTENT => {}
        StatusCode::OK => return Err("the range was ignored (HTTP 200 with the whole blob)".into()),
        s => return Err(format!("HTTP {} to a range request", s.as_u16())),
    }
    if text(CONTENT_TYPE).is_some_and(|t| t.to_ascii_lowercase().starts_with("multipart/")) {
        return Err("a multi-range answer (multipart) where one range was asked for".into());
    }
    let asked = format!("bytes {from}-{to}/{size}");
    let got = text(CONTENT_RANGE).unwrap_or("");
    let same = got == asked || got == format!("bytes {from}-{to}/*");
    if !same {
        return Err(format!(
            "Content-Range {got:?} where {asked:?} was asked for"
        ));
    }
    let len = to - from + 1;
    match text(CONTENT_LENGTH).map(str::parse::<u64>) {
        None => Ok(()),
        Some(Ok(n)) if n == len => Ok(()),
        Some(_) => Err(format!(
            "Content-Length {:?} for a range of {len} bytes",
            text(CONTENT_LENGTH).unwrap_or("")
        )),
    }
}

/// Reads bytes `from..=to` and hands them to `tx` in order: the answer `first` when the
/// probe already opened it, else a GET where ranges go now. A try that fails is resumed
/// from where it stopped, once; an expired location is renewed without counting as a try.
/// Ends with [`Piece::Done`] or [`Piece::Failed`].
pub(super) async fn read(
    layer: std::sync::Arc<Layer>,
    from: u64,
    to: u64,
    mut first: Option<Answer>,
    tx: UnboundedSender<Piece>,
    done: Option<tokio::sync::oneshot::Sender<()>>,
) {
    let mut at = from;
    let mut failures = 0;
    loop {
        let loc = layer.current().await;
        let answer = match first.take() {
            Some(a) => Ok(a),
            None => layer.get(&loc.url, at, to).await,
        };
        let trouble = match answer {
            Ok(a) => match pass(&layer, a, &mut at, to, &tx, &loc).await {
                Ok(()) => {
                    let _ = tx.send(Piece::Done);
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                    return;
                }
                Err(t) => t,
            },
            Err(e) if loc.url != layer.url && matches!(e.status(), Some(401 | 403)) => {
                Trouble::Expired(e.detail().to_owned())
            }
            Err(e) => Trouble::Bad(e.detail().to_owned()),
        };
        let why = match trouble {
            Trouble::Gone => return,
            Trouble::Expired(why) => match layer.renew(loc.generation, at, to).await {
                Some(renewed) => {
                    first = renewed;
                    continue;
                }
                None => format!("{why} (the location expired)"),
            },
            Trouble::Bad(why) => why,
        };
        failures += 1;
        if failures >= TRIES {
            let _ = tx.send(Piece::Failed(format!(
                "range {from}-{to} failed {failures} times, last at byte {at}: {why}"
            )));
            return;
        }
        tracing::warn!(
            "{FETCH} {}: range {from}-{to} at byte {at}: {why}; trying it again",
            layer.what
        );
        tokio::time::sleep(layer.t.retry().backoff(failures)).await;
    }
}

/// Checks one answer for bytes `*at..=to` and hands its body on, advancing `*at`.
async fn pass(
    layer: &Layer,
    mut answer: Answer,
    at: &mut u64,
    to: u64,
    tx: &UnboundedSender<Piece>,
    loc: &Location,
) -> Result<(), Trouble> {
    let status = answer.status();
    if loc.url != layer.url && matches!(status.as_u16(), 401 | 403) {
        return Err(Trouble::Expired(format!(
            "HTTP {} from the redirected location",
            status.as_u16()
        )));
    }
    judge(status, answer.headers(), *at, to, layer.desc.size).map_err(Trouble::Bad)?;
    {
        let mut now = layer.location.lock().await;
        if now.generation == loc.generation {
            now.served += 1;
        }
    }
    let mut batch = Batch {
        tx,
        buf: BytesMut::new(),
        rest: to + 1 - *at,
    };
    let end = loop {
        match answer.chunk().await {
            Ok(Some(chunk)) => {
                let left = to + 1 - *at;
                if chunk.len() as u64 > left {
                    break Err(Trouble::Bad(format!(
                        "the answer goes on past the range's end at {to}"
                    )));
                }
                *at += chunk.len() as u64;
                batch.push(&chunk)?;
            }
            Ok(None) if *at == to + 1 => break Ok(()),
            Ok(None) => {
                break Err(Trouble::Bad(format!(
                    "the answer ended at byte {at}, short of the range's end at {to}"
                )))
            }
            Err(cut) => break Err(Trouble::Bad(cut.to_string())),
        }
    };
    // What arrived is handed on, also before a retry resumes after it.
    batch.flush()?;
    end
}

/// Bytes of a range gathered into pieces of their own before they are handed on: a chunk as
/// the connection delivers it holds on to the connection's larger read buffer for as long as
/// it waits in the window (measured: 8 ranges then cost far more than their size), so
/// bytes that wait are copied to pieces of their size; the copy costs little beside the
/// inflate that follows.
struct Batch<'a> {
    tx: &'a UnboundedSender<Piece>,
    buf: BytesMut,
    /// Bytes of the range still to come, so the last piece is allocated at its size.
    rest: u64,
}

impl Batch<'_> {
    fn push(&mut self, mut chunk: &[u8]) -> Result<(), Trouble> {
        while !chunk.is_empty() {
            if self.buf.capacity() == 0 {
                let size = usize::try_from(self.rest).map_or(PIECE, |r| r.min(PIECE));
                self.buf = BytesMut::with_capacity(size.max(1));
            }
            let n = (self.buf.capacity() - self.buf.len()).min(chunk.len());
            self.buf.extend_from_slice(&chunk[..n]);
            self.rest = self.rest.saturating_sub(n as u64);
            chunk = &chunk[n..];
            if self.buf.len() == self.buf.capacity() {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Trouble> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let piece = std::mem::take(&mut self.buf).freeze();
        self.tx.send(Piece::Data(piece)).map_err(|_| Trouble::Gone)
    }
}
