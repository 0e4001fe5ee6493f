//! Progress of long transfers (layers read, blobs copied), reported to whoever listens: the
//! binary turns it into terminal bars (`report.rs`); the library never draws. One listener per
//! process, set once; with none, progress costs an atomic load per read.

use std::io::{self, Read};
use std::sync::{Arc, OnceLock};

/// Receives progress: a task starts with a label and an expected size, advances, and ends.
pub trait Listener: Send + Sync {
    /// A new task; the returned handle receives its advances and is dropped when it ends.
    fn start(&self, label: String, total: u64) -> Box<dyn Task>;
}

/// One task's progress.
pub trait Task: Send {
    fn advance(&mut self, bytes: u64);
}

static LISTENER: OnceLock<Arc<dyn Listener>> = OnceLock::new();

/// Sets the process's listener (the first call wins).
pub fn listen(l: Arc<dyn Listener>) {
    let _ = LISTENER.set(l);
}

struct Silent;

impl Task for Silent {
    fn advance(&mut self, _: u64) {}
}

/// Starts a task (a no-op one when nobody listens).
pub fn start(label: String, total: u64) -> Box<dyn Task> {
    match LISTENER.get() {
        Some(l) => l.start(label, total),
        None => Box::new(Silent),
    }
}

/// A reader that reports every byte read through it; the task ends when the reader is dropped.
pub struct Reader<R> {
    inner: R,
    task: Box<dyn Task>,
}

impl<R> Reader<R> {
    pub fn new(inner: R, task: Box<dyn Task>) -> Self {
        Reader { inner, task }
    }
}

impl<R: Read> Read for Reader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.task.advance(n as u64);
        Ok(n)
    }
}
