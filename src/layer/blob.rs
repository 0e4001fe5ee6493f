//! A built layer's compressed bytes: in memory when small (every kind but one that streams
//! files), else spooled to an unnamed temporary file in the run's temporary directory
//! (`TMPDIR`), so a layer holding a wheel of hundreds of MB never sits in memory. The file has
//! no name from the start: the system deletes it when the last handle closes, on drop as on a
//! killed run. Readers read it by offset, so any number of uploads may read it at once.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use bytes::Bytes;

/// Bytes a layer keeps in memory before it moves to a temporary file.
pub const MEMORY_MAX: usize = 4 << 20;

/// A finished layer blob, cheap to clone: clones share the bytes or the file.
#[derive(Clone)]
pub struct LayerBlob {
    inner: Arc<Inner>,
}

/// A blob that does not keep its bytes (or its file) alive: [`LayerBlob::downgrade`].
pub(crate) struct WeakBlob(Weak<Inner>);

impl WeakBlob {
    /// The blob, while any clone of it is still held.
    pub fn upgrade(&self) -> Option<LayerBlob> {
        self.0.upgrade().map(|inner| LayerBlob { inner })
    }
}

struct Inner {
    size: u64,
    data: Data,
}

enum Data {
    Memory(Bytes),
    Spooled(File),
}

impl std::fmt::Debug for LayerBlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.inner.data {
            Data::Memory(_) => "memory",
            Data::Spooled(_) => "spooled",
        };
        write!(f, "LayerBlob({kind}, {} bytes)", self.inner.size)
    }
}

impl LayerBlob {
    /// A blob held in memory.
    pub fn memory(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        Self::of(bytes.len() as u64, Data::Memory(bytes))
    }

    fn of(size: u64, data: Data) -> Self {
        LayerBlob {
            inner: Arc::new(Inner { size, data }),
        }
    }

    /// The blob's size in bytes (the descriptor's `size`).
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// The bytes, when the blob is held in memory (`None`: spooled to a temporary file).
    pub fn in_memory(&self) -> Option<&Bytes> {
        match &self.inner.data {
            Data::Memory(b) => Some(b),
            Data::Spooled(_) => None,
        }
    }

    /// Whether the bytes are in a temporary file rather than in memory.
    pub fn is_spooled(&self) -> bool {
        matches!(self.inner.data, Data::Spooled(_))
    }

    /// A reader over the whole blob from its start, with its own position (any number of
    /// readers at once: a spooled file is read by offset).
    pub fn reader(&self) -> Box<dyn Read + Send> {
        match &self.inner.data {
            Data::Memory(b) => Box::new(io::Cursor::new(b.clone())),
            Data::Spooled(_) => Box::new(AtReader {
                blob: self.clone(),
                at: 0,
            }),
        }
    }

    pub(crate) fn downgrade(&self) -> WeakBlob {
        WeakBlob(Arc::downgrade(&self.inner))
    }
}

/// Reads a spooled blob's file by offset.
struct AtReader {
    blob: LayerBlob,
    at: u64,
}

impl Read for AtReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Data::Spooled(file) = &self.blob.inner.data else {
            return Ok(0);
        };
        let end = self.blob.inner.size;
        let want = buf
            .len()
            .min(usize::try_from(end - self.at).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = file.read_at(&mut buf[..want], self.at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the spooled layer's temporary file ends at {} bytes, before its {end} bytes",
                    self.at
                ),
            ));
        }
        self.at += n as u64;
        Ok(n)
    }
}

/// Where a layer's compressed bytes go while it is built: memory until `limit` bytes, then an
/// unnamed temporary file in `dir` (the whole blob moves there).
pub(crate) struct Spool {
    dir: PathBuf,
    limit: usize,
    sink: Sink,
}

enum Sink {
    Memory(Vec<u8>),
    File(BufWriter<File>),
}

impl Spool {
    /// A spool that moves to a file in `dir` past `limit` bytes (0: a file from the start).
    pub fn new(dir: PathBuf, limit: usize) -> io::Result<Self> {
        let mut s = Spool {
            dir,
            limit,
            sink: Sink::Memory(Vec::new()),
        };
        if limit == 0 {
            s.spill()?;
        }
        Ok(s)
    }

    fn spill(&mut self) -> io::Result<()> {
        let file = tempfile::tempfile_in(&self.dir).map_err(|e| in_dir(&self.dir, e))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        if let Sink::Memory(v) = &self.sink {
            w.write_all(v).map_err(|e| in_dir(&self.dir, e))?;
        }
        self.sink = Sink::File(w);
        Ok(())
    }

    /// The blob written, `size` bytes: flushed to its file when spooled.
    pub fn finish(self, size: u64) -> io::Result<LayerBlob> {
        let data = match self.sink {
            Sink::Memory(v) => Data::Memory(Bytes::from(v)),
            Sink::File(w) => {
                let file = w
                    .into_inner()
                    .map_err(|e| in_dir(&self.dir, e.into_error()))?;
                Data::Spooled(file)
            }
        };
        Ok(LayerBlob::of(size, data))
    }
}

/// An error of the temporary file, naming its directory.
fn in_dir(dir: &Path, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "spooling the layer to a temporary file in {} (set TMPDIR to another directory): {e}",
            dir.display()
        ),
    )
}

impl Write for Spool {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Sink::Memory(v) = &self.sink {
            if v.len() + buf.len() > self.limit {
                self.spill()?;
            }
        }
        match &mut self.sink {
            Sink::Memory(v) => v.write(buf),
            Sink::File(w) => w.write(buf).map_err(|e| in_dir(&self.dir, e)),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Memory(_) => Ok(()),
            Sink::File(w) => w.flush().map_err(|e| in_dir(&self.dir, e)),
        }
    }
}
