//! Results on stdout. A reader that goes away early (`apply --json | head -c1`) ends the output
//! quietly, as with other Unix tools, instead of a panic; the digest map never depends on it.

use std::io::{ErrorKind, Write};

/// Writes one block of text and a newline to stdout.
pub fn line(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let written = out
        .write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match written {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Like [`line`], with the error as the one sentence the command reports.
pub fn print(text: &str) -> anyhow::Result<()> {
    line(text).map_err(|e| anyhow::anyhow!("cannot write results to standard output: {e}"))
}
