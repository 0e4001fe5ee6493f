//! Unified diffs as pure functions over bytes: parse a git (`diff --git a/x b/x`) or GNU
//! (`--- a/x` / `+++ b/x`) diff of several files, and apply one file's hunks forwards or in
//! reverse the way GNU `patch -p1 --fuzz=0` does: each hunk at its context, searched outward
//! from its line (nearest first, later lines first on a tie), an offset reported, never fuzz.
//!
//! Written here rather than taken from a crate (checked on crates.io, 2026-12): `diffy` parses
//! one file per patch, knows neither git headers nor `/dev/null` creations and deletions, and
//! its apply neither reports offsets nor anchors hunks at the start or end of a file; `patch`
//! and `gitpatch` only parse, over `&str` (non-UTF-8 and CRLF lines are not kept byte for byte).
//! What is needed is small, and it is checked against GNU patch itself on real vLLM files
//! (`tests/proof/test_diff_kind.py`).

use std::fmt;

/// One line of a hunk, without its line terminator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkLine {
    pub op: Op,
    pub text: Vec<u8>,
    /// Followed by `\ No newline at end of file`: the line ends its file (on the side(s) it
    /// belongs to) without a newline.
    pub no_eol: bool,
}

/// What a hunk line does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Context,
    Del,
    Add,
}

/// One `@@ -a,b +c,d @@` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub old_start: usize,
    pub old_len: usize,
    pub new_start: usize,
    pub new_len: usize,
    pub lines: Vec<HunkLine>,
    /// Line of the `@@` header in the diff (1-based), for messages.
    pub line: usize,
}

/// The hunks of one file. `old`/`new` are paths with the first component stripped (`-p1`);
/// `None` is `/dev/null` (a created or a deleted file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    pub old: Option<String>,
    pub new: Option<String>,
    pub hunks: Vec<Hunk>,
    /// Line of the `---` header in the diff (1-based).
    pub line: usize,
}

impl FileDiff {
    /// The path the diff is about (relative to the root it applies to).
    pub fn path(&self) -> &str {
        self.new.as_deref().or(self.old.as_deref()).unwrap_or("")
    }

    /// Old side `/dev/null`: the file is new.
    pub fn creates(&self) -> bool {
        self.old.is_none()
    }

    /// New side `/dev/null`: the file goes (a whiteout in an image).
    pub fn deletes(&self) -> bool {
        self.new.is_none()
    }

    /// The same diff, undone: what `patch -R` applies.
    pub fn reversed(&self) -> FileDiff {
        FileDiff {
            old: self.new.clone(),
            new: self.old.clone(),
            line: self.line,
            hunks: self
                .hunks
                .iter()
                .map(|h| Hunk {
                    old_start: h.new_start,
                    old_len: h.new_len,
                    new_start: h.old_start,
                    new_len: h.old_len,
                    line: h.line,
                    lines: h
                        .lines
                        .iter()
                        .map(|l| HunkLine {
                            op: match l.op {
                                Op::Del => Op::Add,
                                Op::Add => Op::Del,
                                Op::Context => Op::Context,
                            },
                            text: l.text.clone(),
                            no_eol: l.no_eol,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// A diff that cannot be read, at a line of the diff file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

fn err<T>(line: usize, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        message: message.into(),
    })
}

/// Splits bytes into lines without their `\n` (a `\r` before it stays in the line).
fn split_lines(bytes: &[u8]) -> Vec<&[u8]> {
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if bytes.ends_with(b"\n") || bytes.is_empty() {
        lines.pop();
    }
    lines
}

/// A header path: the part before a tab (GNU diff puts a timestamp there), `/dev/null` as
/// `None`, and the first component stripped (`-p1`). Paths that could leave the root are refused.
fn header_path(raw: &[u8], line: usize) -> Result<Option<String>, ParseError> {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let name = raw.split(|b| *b == b'\t').next().unwrap_or(raw);
    let name = std::str::from_utf8(name)
        .map_err(|_| ParseError {
            line,
            message: "file name is not UTF-8".into(),
        })?
        .trim_end();
    if name == "/dev/null" {
        return Ok(None);
    }
    if name.starts_with('"') {
        return err(line, format!("quoted file name {name} is not supported"));
    }
    let Some((_, rest)) = name.split_once('/') else {
        return err(
            line,
            format!("file name {name:?} has no leading component to strip (diffs are applied as with patch -p1)"),
        );
    };
    if rest.is_empty()
        || rest.starts_with('/')
        || rest
            .split('/')
            .any(|c| c == ".." || c == "." || c.is_empty())
    {
        return err(
            line,
            format!("file name {name:?} is not a plain relative path below the package root"),
        );
    }
    Ok(Some(rest.to_owned()))
}

/// Parses `@@ -a[,b] +c[,d] @@`.
fn hunk_header(l: &[u8], line: usize) -> Result<(usize, usize, usize, usize), ParseError> {
    let text = String::from_utf8_lossy(l);
    let bad = || ParseError {
        line,
        message: format!("malformed hunk header {:?}", text.trim_end()),
    };
    let inner = text
        .strip_prefix("@@ -")
        .and_then(|t| t.split_once(" @@"))
        .map(|(r, _)| r)
        .ok_or_else(bad)?;
    let (old, new) = inner.split_once(" +").ok_or_else(bad)?;
    let range = |s: &str| -> Option<(usize, usize)> {
        match s.split_once(',') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => Some((s.parse().ok()?, 1)),
        }
    };
    let (a, b) = range(old).ok_or_else(bad)?;
    let (c, d) = range(new).ok_or_else(bad)?;
    Ok((a, b, c, d))
}

/// Parses every file of a diff. Text outside file sections (a commit message, `index` lines,
/// `new file mode`) is skipped; git entries without text hunks (binary, rename, copy, mode or
/// empty-file changes) are refused, as is a file named twice.
pub fn parse(bytes: &[u8]) -> Result<Vec<FileDiff>, ParseError> {
    let lines = split_lines(bytes);
    let mut files: Vec<FileDiff> = Vec::new();
    // The `diff --git` line of a section whose `---` header has not been seen yet.
    let mut git_pending: Option<usize> = None;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let no = i + 1;
        if l.starts_with(b"diff --git ") {
            if let Some(at) = git_pending {
                return err(at, "git diff entry without text hunks (binary, rename, copy, mode-only or empty-file change) is not supported");
            }
            git_pending = Some(no);
        } else if l.starts_with(b"rename from ")
            || l.starts_with(b"copy from ")
            || l.starts_with(b"GIT binary patch")
            || (l.starts_with(b"Binary files ") && git_pending.is_some())
        {
            return err(
                no,
                "renames, copies and binary diffs are not supported; write them as a deletion and a creation",
            );
        } else if l.starts_with(b"--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with(b"+++ "))
        {
            git_pending = None;
            let old = header_path(&l[4..], no)?;
            let new = header_path(&lines[i + 1][4..], no + 1)?;
            match (&old, &new) {
                (None, None) => return err(no, "both sides are /dev/null"),
                (Some(o), Some(n)) if o != n => {
                    return err(
                        no,
                        format!(
                        "renames are not supported ({o} -> {n}); write a deletion and a creation"
                    ),
                    )
                }
                _ => {}
            }
            let mut fd = FileDiff {
                old,
                new,
                hunks: Vec::new(),
                line: no,
            };
            if files.iter().any(|f| f.path() == fd.path()) {
                return err(no, format!("{} is named twice in this diff", fd.path()));
            }
            i += 2;
            while i < lines.len() && lines[i].starts_with(b"@@ ") {
                let (hunk, next) = parse_hunk(&lines, i)?;
                fd.hunks.push(hunk);
                i = next;
            }
            if fd.hunks.is_empty() {
                return err(no, format!("{} has no hunks", fd.path()));
            }
            if fd.creates() && (fd.hunks.len() != 1 || fd.hunks[0].old_len != 0) {
                return err(
                    no,
                    format!(
                        "{} is created from /dev/null but its hunks remove lines",
                        fd.path()
                    ),
                );
            }
            if fd.deletes() && (fd.hunks.len() != 1 || fd.hunks[0].new_len != 0) {
                return err(
                    no,
                    format!(
                        "{} is deleted (+++ /dev/null) but its hunks add lines",
                        fd.path()
                    ),
                );
            }
            files.push(fd);
            continue;
        } else if l.starts_with(b"@@ ") {
            return err(no, "hunk without a ---/+++ file header");
        }
        i += 1;
    }
    if let Some(at) = git_pending {
        return err(at, "git diff entry without text hunks (binary, rename, copy, mode-only or empty-file change) is not supported");
    }
    if files.is_empty() {
        return err(1, "no file diff (---/+++ headers with @@ hunks) found");
    }
    Ok(files)
}

/// One hunk from its header at `at`: lines are read until both sides' counts are met.
fn parse_hunk(lines: &[&[u8]], at: usize) -> Result<(Hunk, usize), ParseError> {
    let (old_start, old_len, new_start, new_len) = hunk_header(lines[at], at + 1)?;
    let mut hunk = Hunk {
        old_start,
        old_len,
        new_start,
        new_len,
        lines: Vec::new(),
        line: at + 1,
    };
    let (mut old_seen, mut new_seen) = (0, 0);
    let mut i = at + 1;
    while old_seen < old_len || new_seen < new_len {
        let Some(l) = lines.get(i) else {
            return err(
                at + 1,
                format!("hunk ends early: the diff stops before its {old_len} old and {new_len} new lines"),
            );
        };
        let (op, text) = match l.first() {
            Some(b' ') => (Op::Context, &l[1..]),
            Some(b'-') => (Op::Del, &l[1..]),
            Some(b'+') => (Op::Add, &l[1..]),
            // An empty line is an empty context line whose space an editor removed.
            None => (Op::Context, &l[..]),
            Some(b'\\') => {
                mark_no_eol(&mut hunk, i + 1)?;
                i += 1;
                continue;
            }
            Some(_) => {
                return err(
                    i + 1,
                    format!(
                    "hunk at line {} ends early: expected {old_len} old and {new_len} new lines",
                    at + 1
                ),
                )
            }
        };
        match op {
            Op::Context => {
                old_seen += 1;
                new_seen += 1;
            }
            Op::Del => old_seen += 1,
            Op::Add => new_seen += 1,
        }
        if old_seen > old_len || new_seen > new_len {
            return err(
                i + 1,
                format!(
                    "hunk at line {} has more lines than its header says",
                    at + 1
                ),
            );
        }
        hunk.lines.push(HunkLine {
            op,
            text: text.to_vec(),
            no_eol: false,
        });
        i += 1;
    }
    if lines.get(i).is_some_and(|l| l.starts_with(b"\\")) {
        mark_no_eol(&mut hunk, i + 1)?;
        i += 1;
    }
    Ok((hunk, i))
}

fn mark_no_eol(hunk: &mut Hunk, line: usize) -> Result<(), ParseError> {
    match hunk.lines.last_mut() {
        Some(last) => {
            last.no_eol = true;
            Ok(())
        }
        None => err(
            line,
            "\"\\ No newline at end of file\" before any hunk line",
        ),
    }
}

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
        let max_pos = src.len().checked_sub(old.len());
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
        let mut found = None;
        if let Some(max_pos) = max_pos {
            let span = src.len() as isize + 1;
            for d in 0..=span {
                let tries: &[isize] = if d == 0 { &[0] } else { &[d, -d] };
                for &t in tries {
                    let pos = guess + t;
                    if pos >= 0 && (pos as usize) <= max_pos && fits(pos as usize) {
                        found = Some(pos as usize);
                        break;
                    }
                }
                if found.is_some() {
                    break;
                }
            }
        }
        let Some(pos) = found else {
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
        done = pos + old.len();
    }
    out.extend_from_slice(&src[done..]);
    Ok((text.render(&out), placed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "\
From: someone
Subject: two files

diff --git a/pkg/a.py b/pkg/a.py
index 1111111..2222222 100644
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
@@ -7,3 +7,4 @@
 seven
 eight
 nine
+ten
diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1,2 @@
+created
+file
\\ No newline at end of file
";

    const A: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\n";

    fn files() -> Vec<FileDiff> {
        parse(TWO.as_bytes()).expect("parses")
    }

    #[test]
    fn parses_git_diff_of_several_files() {
        let f = files();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].path(), "pkg/a.py");
        assert_eq!(f[0].hunks.len(), 2);
        assert!(f[1].creates());
        assert!(f[1].hunks[0].lines[1].no_eol);
    }

    #[test]
    fn applies_and_reverses() {
        let f = files();
        let (out, placed) = apply(A.as_bytes(), &f[0]).expect("applies");
        assert_eq!(
            String::from_utf8(out.clone()).expect("utf8"),
            "one\nTWO\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n"
        );
        assert!(placed.iter().all(|p| p.offset == 0));
        let (back, _) = apply(&out, &f[0].reversed()).expect("reverses");
        assert_eq!(back, A.as_bytes());
        assert!(apply(&out, &f[0]).is_err(), "applying twice must not match");
        let (created, _) = apply(b"", &f[1]).expect("creates");
        assert_eq!(created, b"created\nfile");
    }

    #[test]
    fn offset_is_found_and_reported() {
        let f = files();
        let shifted = format!("zero\nzero\n{A}");
        let (out, placed) = apply(shifted.as_bytes(), &f[0]).expect("applies");
        assert_eq!(
            placed,
            [Placed { hunk: 1, offset: 2 }, Placed { hunk: 2, offset: 2 }]
        );
        assert!(out.starts_with(b"zero\nzero\none\nTWO\n"));
        assert!(out.ends_with(b"nine\nten\n"));
    }

    #[test]
    fn less_context_on_one_side_anchors_at_that_end() {
        // As GNU patch: a hunk without leading context was made at the top of the file.
        let top =
            parse(b"--- a/p/x\n+++ b/p/x\n@@ -1,2 +1,2 @@\n-one\n+ONE\n two\n").expect("parses");
        assert!(apply(b"one\ntwo\nthree\n", &top[0]).is_ok());
        assert!(apply(b"zero\none\ntwo\nthree\n", &top[0]).is_err());
        let end = parse(b"--- a/p/y\n+++ b/p/y\n@@ -2,2 +2,2 @@\n two\n-three\n+THREE\n")
            .expect("parses");
        assert!(apply(b"one\ntwo\nthree\n", &end[0]).is_ok());
        assert!(apply(b"one\ntwo\nthree\nfour\n", &end[0]).is_err());
    }

    #[test]
    fn context_mismatch_is_refused_without_fuzz() {
        let f = files();
        let changed = A.replace("three", "THREE");
        let m = apply(changed.as_bytes(), &f[0]).expect_err("mismatch");
        assert_eq!(m.hunk, 1);
    }

    #[test]
    fn crlf_file_and_bom_are_kept() {
        let f = files();
        let crlf = format!("\u{FEFF}{}", A.replace('\n', "\r\n"));
        let (out, _) = apply(crlf.as_bytes(), &f[0]).expect("applies");
        let s = String::from_utf8(out).expect("utf8");
        assert!(s.starts_with('\u{FEFF}'));
        assert_eq!(s.matches('\n').count(), s.matches("\r\n").count());
        assert!(s.contains("one\r\nTWO\r\nthree\r\n"));
        assert!(s.ends_with("nine\r\nten\r\n"));
    }

    #[test]
    fn no_newline_at_end_is_respected() {
        let d = "--- a/p/x\n+++ b/p/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n";
        let f = parse(d.as_bytes()).expect("parses");
        let (out, _) = apply(b"a\nb", &f[0]).expect("applies");
        assert_eq!(out, b"a\nc\n");
        assert!(apply(b"a\nb\n", &f[0]).is_err(), "b has a newline there");
        let (back, _) = apply(&out, &f[0].reversed()).expect("reverses");
        assert_eq!(back, b"a\nb");
    }

    #[test]
    fn gnu_headers_with_timestamps_and_deletions() {
        let d = "--- a/p/gone.py\t2026-01-01 00:00:00.000000000 +0000\n+++ /dev/null\t1970-01-01 00:00:00.000000000 +0000\n@@ -1,2 +0,0 @@\n-x\n-y\n";
        let f = parse(d.as_bytes()).expect("parses");
        assert!(f[0].deletes());
        assert_eq!(f[0].path(), "p/gone.py");
        assert_eq!(apply(b"x\ny\n", &f[0]).expect("applies").0, b"");
    }

    #[test]
    fn bad_diffs_name_their_line() {
        let cases: &[(&str, usize, &str)] = &[
            (
                "--- a/p/x\n+++ b/p/x\n@@ -1,2 +1,2 @@\n a\n",
                3,
                "ends early",
            ),
            ("hello\n", 1, "no file diff"),
            (
                "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n",
                1,
                "plain relative",
            ),
            ("--- a/p/x\n+++ b/p/y\n@@ -1 +1 @@\n-a\n+b\n", 1, "renames"),
            (
                "diff --git a/p/x b/p/x\nold mode 100644\nnew mode 100755\n",
                1,
                "without text hunks",
            ),
            (
                "--- a/p/x\n+++ b/p/x\n@@ -1 +x @@\n-a\n+b\n",
                3,
                "malformed hunk header",
            ),
        ];
        for (text, line, needle) in cases {
            let e = parse(text.as_bytes()).expect_err(text);
            assert_eq!(e.line, *line, "{text:?}: {e}");
            assert!(e.message.contains(needle), "{text:?}: {e}");
        }
    }
}
