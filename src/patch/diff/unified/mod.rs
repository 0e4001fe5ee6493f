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

mod apply;
mod parse;
#[cfg(test)]
mod tests;
mod types;

pub use apply::{apply, Mismatch, Placed};
pub use parse::parse;
pub use types::{FileDiff, Hunk, HunkLine, Op, ParseError};
