//! sha256 digests in their `sha256:<hex>` form, and readers/writers that hash what passes.

use std::io::{self, Read, Write};

use sha2::{Digest as _, Sha256};

/// `sha256:<hex>` of a byte slice.
pub fn sha256(bytes: &[u8]) -> String {
    finish(Sha256::new_with_prefix(bytes))
}

/// `sha256:<hex>` of what a hasher has seen.
pub fn finish(hasher: Sha256) -> String {
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// The hex sha256 (no prefix: locks and fetched inputs name it so) of a whole file, streamed.
pub fn file_hex(path: &std::path::Path) -> io::Result<String> {
    let mut file = io::BufReader::new(std::fs::File::open(path)?);
    let mut hasher = Sha256::new();
    io::copy(&mut file, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

/// Checks the shape of a digest string coming from a registry or a document.
pub fn is_sha256(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

/// A reader that hashes and counts every byte read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// Reads the rest to the end, then returns the digest and byte count of everything read.
    pub fn finish(mut self) -> io::Result<(String, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((finish(self.hasher), self.count))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// A writer that hashes and counts every byte written through it.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    count: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    pub fn finish(self) -> (W, String, u64) {
        (self.inner, finish(self.hasher), self.count)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
