//! A layer read as ranges in parallel (issue 20): one connection to a CDN rarely fills a
//! link, so a layer larger than one range is read as several single-range GETs at once,
//! handed on in order through a bounded window to the same stream a plain download gives.
//!
//! The first range goes to the registry alone: its answer says whether ranges are served and
//! where from (a redirect is followed once; the other ranges go to that location, without
//! the registry's credentials), and how fast it came says whether more connections would
//! help (see [`ONE_STREAM_RATE`]). Each range is checked (`part`) and retried once alone; a
//! range that fails again, or a registry that ignores ranges, turns the rest of the layer
//! into one plain stream (`download`), so a registry without ranges is read exactly as
//! before. The sha256 and size of the whole blob are checked over the bytes in order, before
//! the stream ends cleanly, as for a plain download: the hash runs in the task that reads
//! this stream (`Registry::blob_reader`'s), beside the inflate and tar scan on their own
//! thread, and the ranges arrive in tasks of their own.
//!
//! Bounds: the ranges of the whole run, read or waiting to be handed on, hold a place in the
//! transport's window (`--range-parallel`), so memory stays within places x range size; each
//! request takes a request slot like any other (`--jobs`), under the same idle timeout and
//! size-scaled deadline.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};

use super::blobs::FETCH;
use super::download::Download;
use crate::media::Descriptor;
use crate::registry::body::Answer;
use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;
use crate::registry::settings::Ranges;
use crate::registry::store::Tally;
use crate::registry::transport::Transport;

mod part;
#[cfg(test)]
mod tests;

use part::{Layer, Piece};

/// One connection at least this fast (bytes per second, over the first range's body) is not
/// what limits a layer's read: the inflate after it is slower (on one core of the development
/// machine it takes about 250 MiB/s of gzip), so the rest is read as one stream, sparing the
/// registry a request per range (measured on localhost: 300 MiB/s and more; through the
/// benchmark's 20 MB/s link: 17 MiB/s). Below it, more connections bring more.
const ONE_STREAM_RATE: f64 = 200.0 * 1024.0 * 1024.0;

/// A first range shorter than this is too short to time (it may come in one read): the rest is
/// read in ranges whatever its rate.
const TIMED: u64 = 1024 * 1024;

/// Streams a blob read in parallel ranges, verified as [`super::download::chunks`] verifies a
/// plain download; the caller checks [`crate::registry::Ranges::applies_to`] first.
pub(crate) fn chunks(
    t: &Transport,
    repo: &Repo,
    desc: &Descriptor,
) -> impl Stream<Item = Result<Bytes, Error>> + Send + 'static {
    let reader = Reader {
        layer: Arc::new(Layer::new(t, repo, desc)),
        order: None,
        head: None,
        tally: Tally::new(),
        plain: None,
        done: false,
        scheduler: None,
    };
    futures_util::stream::unfold(reader, |mut r| async move {
        let item = r.next().await?;
        Some((item, r))
    })
}

/// A task stopped when this is dropped.
struct Abort(tokio::task::JoinHandle<()>);

impl Drop for Abort {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A range being read: its bytes arrive on `rx`. Dropping it stops its task and gives its
/// place in the window back.
struct Part {
    to: u64,
    rx: mpsc::UnboundedReceiver<Piece>,
    _task: Abort,
    _place: OwnedSemaphorePermit,
}

/// What the scheduler hands the reader, in the blob's order.
enum Next {
    Part(Part),
    /// Read the layer as one plain stream: with the whole-blob answer the registry gave the
    /// first range (it ignores ranges), or from scratch; why, and whether that is worth a
    /// warning (a wrong answer, not a registry without ranges).
    Plain(Option<Box<Answer>>, String, bool),
}

/// Starts ranges in order, each once it has a place in the window, and hands them to the
/// reader: the first alone (the probe), then the others towards where it was answered from.
async fn schedule(layer: Arc<Layer>, tx: mpsc::Sender<Next>) {
    let size = layer.desc.size;
    let step = layer.t.ranges().size.max(Ranges::MIN_SIZE);
    let place = layer.t.window_place().await;
    let first_to = step.min(size) - 1;
    let (done, first_done) = oneshot::channel();
    // Timed from its answer on: one stream would pay for its request once.
    let (started, first) = match layer.probe(first_to).await {
        Ok(answer) => (
            Instant::now(),
            start(&layer, 0, first_to, Some(answer), place, Some(done)),
        ),
        Err((answer, why, loud)) => {
            let _ = tx.send(Next::Plain(answer.map(Box::new), why, loud)).await;
            return;
        }
    };
    if tx.send(Next::Part(first)).await.is_err() {
        return;
    }
    // How fast one connection brought the first range says whether more would help. (When it
    // failed, the reader reads the rest as one stream anyway.)
    if first_done.await.is_err() {
        return;
    }
    let rate = (first_to + 1) as f64 / started.elapsed().as_secs_f64().max(1e-6);
    let mib_s = rate / f64::from(1 << 20);
    if first_to + 1 >= TIMED && rate >= ONE_STREAM_RATE {
        let why = format!("one connection brought the first range at {mib_s:.0} MiB/s, faster than the inflate takes it");
        let _ = tx.send(Next::Plain(None, why, false)).await;
        return;
    }
    tracing::debug!(
        "{FETCH} {}: one connection brought the first range at {mib_s:.0} MiB/s; reading the rest in parallel ranges",
        layer.what
    );
    let mut from = first_to + 1;
    while from < size {
        let place = layer.t.window_place().await;
        let to = (from + step).min(size) - 1;
        if tx
            .send(Next::Part(start(&layer, from, to, None, place, None)))
            .await
            .is_err()
        {
            return;
        }
        from = to + 1;
    }
}

/// Spawns the task that reads bytes `from..=to`; `done` hears when they all arrived.
fn start(
    layer: &Arc<Layer>,
    from: u64,
    to: u64,
    first: Option<Answer>,
    place: OwnedSemaphorePermit,
    done: Option<oneshot::Sender<()>>,
) -> Part {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(part::read(layer.clone(), from, to, first, tx, done));
    Part {
        to,
        rx,
        _task: Abort(task),
        _place: place,
    }
}

type Item = Option<Result<Bytes, Error>>;

/// The reader's state between chunks: the ranges in order, the bytes handed on so far (and
/// their hash), or the plain stream that took over.
struct Reader {
    layer: Arc<Layer>,
    order: Option<mpsc::Receiver<Next>>,
    head: Option<Part>,
    tally: Tally,
    plain: Option<Download>,
    done: bool,
    scheduler: Option<Abort>,
}

impl Reader {
    /// The next chunk in order; `None` once the blob is complete and verified, or after an
    /// error.
    async fn next(&mut self) -> Item {
        loop {
            if self.done {
                return None;
            }
            if let Some(plain) = self.plain.as_mut() {
                return plain.next().await;
            }
            if self.head.is_none() {
                match self.next_part().await {
                    Some(Next::Part(p)) => self.head = Some(p),
                    Some(Next::Plain(answer, why, loud)) => {
                        self.fall_back(answer.map(|a| *a), &why, loud)
                    }
                    None if self.tally.bytes < self.layer.desc.size => {
                        self.fall_back(None, "the ranges stopped short of the end", true)
                    }
                    None => return self.end(),
                }
                continue;
            }
            let Some(head) = self.head.as_mut() else {
                continue;
            };
            match head.rx.recv().await {
                Some(Piece::Data(chunk)) => {
                    let size = self.layer.desc.size;
                    if !self.tally.add(&chunk, Some(size)) {
                        return self.fail(format!(
                            "the registry sent more than the {size} bytes the descriptor gives; stopped reading"
                        ));
                    }
                    return Some(Ok(chunk));
                }
                Some(Piece::Done) if self.tally.bytes == head.to + 1 => self.head = None,
                Some(Piece::Done) => {
                    let why = format!("range ending at {} ended early", head.to);
                    self.fall_back(None, &why, true);
                }
                Some(Piece::Failed(why)) => self.fall_back(None, &why, true),
                None => self.fall_back(None, "a range reader stopped", true),
            }
        }
    }

    /// The next range in order, starting the scheduler on first use (inside the runtime).
    async fn next_part(&mut self) -> Option<Next> {
        if self.order.is_none() {
            let (tx, rx) = mpsc::channel(self.layer.t.ranges().parallel.max(1));
            let task = tokio::spawn(schedule(self.layer.clone(), tx));
            self.order = Some(rx);
            self.scheduler = Some(Abort(task));
        }
        self.order.as_mut()?.recv().await
    }

    /// Every range was handed on: the blob is checked whole.
    fn end(&mut self) -> Item {
        let (got, size) = (self.tally.bytes, self.layer.desc.size);
        self.done = true;
        if let Some(actual) = self.tally.mismatch(&self.layer.desc.digest, Some(size)) {
            return self.fail(format!(
                "digest mismatch: the registry served {got} bytes (the manifest says {size}) whose digest is {actual}"
            ));
        }
        None
    }

    /// Stops every range and reads the rest of the blob as one plain stream, from the bytes
    /// handed on so far; `loud` when a failure (not a registry without ranges) caused it.
    fn fall_back(&mut self, answer: Option<Answer>, why: &str, loud: bool) {
        self.scheduler = None;
        self.head = None;
        self.order = None;
        let at = self.tally.bytes;
        let left = self.layer.desc.size - at;
        if loud {
            tracing::warn!(
                "{FETCH} {}: {why}; reading the other {left} bytes as one stream",
                self.layer.what
            );
        } else {
            tracing::debug!(
                "{FETCH} {}: {why}; reading {left} bytes as one stream",
                self.layer.what
            );
        }
        let tally = std::mem::replace(&mut self.tally, Tally::new());
        let l = &self.layer;
        self.plain = Some(Download::rest(&l.t, &l.repo, &l.desc, tally, answer));
    }

    fn fail(&mut self, detail: String) -> Item {
        self.done = true;
        self.scheduler = None;
        self.head = None;
        self.order = None;
        Some(Err(Error::new(
            ErrorKind::Integrity,
            FETCH,
            &self.layer.what,
            detail,
        )))
    }
}
