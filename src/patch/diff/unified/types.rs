//! The parsed form of a unified diff: files, hunks and lines, and the error naming a line.

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

pub(super) fn err<T>(line: usize, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        message: message.into(),
    })
}
