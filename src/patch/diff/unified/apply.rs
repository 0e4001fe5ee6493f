//! Applying one file's hunks as GNU `patch --fuzz=0` does: at their context, searched outward.

use std::fmt;

use super::types::{FileDiff, Hunk, Op};

/// A file's lines, with what must be written back as it was.
struct Text {
    bom: bool,
    crlf: bool,
    /// (line without terminator, ends with a newline)
    lines: Vec<(Vec<u8>, bool)>,
}

impl Text {
    /// Splits a file. CRLF: when every line of the file ends in CRLF and the diff's lines carry
    /// no `\r`, lines are compared without it and written back with CRLF. BOM: when the file
    /// has one and the diff's lines do not, it is set aside and put back.
    fn parse(bytes: &[u8], fd: &FileDiff) -> Text {
        let diff_has = |pred: &dyn Fn(&[u8]) -> bool| {
            fd.hunks
                .iter()
                .flat_map(|h| &h.lines)
                .any(|l| pred(&l.text))
        };
        let bom =
            bytes.starts_with(b"\xEF\xBB\xBF") && !diff_has(&|t| t.starts_with(b"\xEF\xBB\xBF"));
        let body = if bom { &bytes[3..] } else { bytes };
        let newlines = body.iter().filter(|b| **b == b'\n').count();
        let crlfs = body.windows(2).filter(|w| w == b"\r\n").count();
        let crlf = newlines > 0 && crlfs == newlines && !diff_has(&|t| t.ends_with(b"\r"));
        let mut lines: Vec<(Vec<u8>, bool)> = body
            .split(|b| *b == b'\n')
            .map(|l| {
                let l = if crlf {
                    l.strip_suffix(b"\r").unwrap_or(l)
                } else {
                    l
                };
                (l.to_vec(), true)
            })
            .collect();
        // The piece after the last newline: empty when the file ends with one.
        if let Some(last) = lines.pop() {
            if !last.0.is_empty() {
                lines.push((last.0, false));
            }
        }
        Text { bom, crlf, lines }
    }

    fn render(&self, lines: &[(Vec<u8>, bool)]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.bom {
            out.extend_from_slice(b"\xEF\xBB\xBF");
        }
        for (text, eol) in lines {
            out.extend_from_slice(text);
            if *eol {
                out.extend_from_slice(if self.crlf { b"\r\n" } else { b"\n" });
            }
        }
        out
    }
}

/// Where a hunk went: its number (1-based) and the offset from the line its header names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub hunk: usize,
    pub offset: isize,
}

/// A hunk whose context is not in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub hunk: usize,
    pub line: usize,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hunk #{} (at line {}) does not match: its context is not in the file",
            self.hunk, self.line
        )
    }
}

/// Where one hunk applies in `src`: the position nearest its nominal line (moved by the
/// previous hunk's offset), searched outward, at or after `done`; `None` when its context is
/// nowhere.
fn place(src: &[(Vec<u8>, bool)], h: &Hunk, done: usize, carry: isize) -> Option<(usize, usize)> {
    let old: Vec<(&[u8], bool)> = h
        .lines
        .iter()
        .filter(|l| l.op != Op::Add)
        .map(|l| (l.text.as_slice(), !l.no_eol))
        .collect();
    let lead = h.lines.iter().take_while(|l| l.op == Op::Context).count();
    let trail = h
        .lines
        .iter()
        .rev()
        .take_while(|l| l.op == Op::Context)
        .count();
    // `-5,0` inserts after line 5; `-5,3` starts at line 5.
    let nominal = if h.old_len == 0 {
        h.old_start
    } else {
        h.old_start.saturating_sub(1)
    };
    let max_pos = src.len().checked_sub(old.len())?;
    let fits = |pos: usize| -> bool {
        pos >= done
            && pos + old.len() <= src.len()
            && old
                .iter()
                .zip(&src[pos..pos + old.len()])
                .all(|((t, eol), (s, seol))| t == &s.as_slice() && eol == seol)
            // Less context on one side means the diff was made at that end of the file.
            && (lead >= trail || pos == 0)
            && (trail >= lead || pos + old.len() == src.len())
    };
    let guess = nominal as isize + carry;
    // Far enough to reach both ends of the file, even from a line past its end (GNU patch
    // finds a hunk whose header names line 46 at line 13 of a 24-line file).
    let span = (src.len() as isize).max(guess.abs()) + 1;
    for d in 0..=span {
        let tries: &[isize] = if d == 0 { &[0] } else { &[d, -d] };
        for &t in tries {
            let pos = guess + t;
            if pos >= 0 && (pos as usize) <= max_pos && fits(pos as usize) {
                return Some((pos as usize, nominal));
            }
        }
    }
    None
}

/// Applies one file's hunks to `file` (empty for a created file). The result of a deletion is
/// empty. Every hunk must match exactly; none is applied with fuzz.
pub fn apply(file: &[u8], fd: &FileDiff) -> Result<(Vec<u8>, Vec<Placed>), Mismatch> {
    let text = Text::parse(file, fd);
    let src = &text.lines;
    let mut out: Vec<(Vec<u8>, bool)> = Vec::new();
    let mut placed = Vec::new();
    // Next unread line of `src`, and the offset of the previous hunk (GNU carries it over).
    let mut done = 0usize;
    let mut carry: isize = 0;
    for (n, h) in fd.hunks.iter().enumerate() {
        let Some((pos, nominal)) = place(src, h, done, carry) else {
            return Err(Mismatch {
                hunk: n + 1,
                line: h.old_start,
            });
        };
        let offset = pos as isize - nominal as isize;
        carry = offset;
        placed.push(Placed {
            hunk: n + 1,
            offset,
        });
        out.extend_from_slice(&src[done..pos]);
        out.extend(
            h.lines
                .iter()
                .filter(|l| l.op != Op::Del)
                .map(|l| (l.text.clone(), !l.no_eol)),
        );
        done = pos + old_len(h);
    }
    out.extend_from_slice(&src[done..]);
    Ok((text.render(&out), placed))
}

/// How many lines of the old file a hunk covers.
fn old_len(h: &Hunk) -> usize {
    h.lines.iter().filter(|l| l.op != Op::Add).count()
}
