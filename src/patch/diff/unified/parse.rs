//! Reading a unified diff: file headers (git or GNU), hunk headers and lines.

use super::types::{err, FileDiff, Hunk, HunkLine, Op, ParseError};

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
            let (fd, next) = parse_file(&lines, i)?;
            if files.iter().any(|f| f.path() == fd.path()) {
                return err(no, format!("{} is named twice in this diff", fd.path()));
            }
            files.push(fd);
            i = next;
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

/// One file's section from its `---`/`+++` header at `at`, with its hunks; the index of the
/// line after it.
fn parse_file(lines: &[&[u8]], at: usize) -> Result<(FileDiff, usize), ParseError> {
    let no = at + 1;
    let old = header_path(&lines[at][4..], no)?;
    let new = header_path(&lines[at + 1][4..], no + 1)?;
    match (&old, &new) {
        (None, None) => return err(no, "both sides are /dev/null"),
        (Some(o), Some(n)) if o != n => {
            return err(
                no,
                format!("renames are not supported ({o} -> {n}); write a deletion and a creation"),
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
    let mut i = at + 2;
    while i < lines.len() && lines[i].starts_with(b"@@ ") {
        let (hunk, next) = parse_hunk(lines, i)?;
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
    Ok((fd, i))
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
