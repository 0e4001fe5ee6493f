//! What a patch decides for one image ([`Verdict`]: an outcome, why, what it found, and the
//! changes to append), the changes themselves ([`Change`]), and what `verify` finds when it
//! checks a patch on a patched image ([`Checked`]). Scan, layer, push and digest-map code only
//! ever see these, whatever the kind.

use std::io::Read;
use std::sync::Arc;

use serde_json::Value;

use crate::patch::outcome::Outcome;
use crate::scan::FileEntry;

/// One change to the file system the image shows.
#[derive(Debug, Clone)]
pub enum Change {
    /// A file at `entry.path` with `entry.content`; mode, owner and names come from the file it
    /// replaces (0644 root:root for a created file), the mtime is the patch's.
    Write(FileEntry),
    /// A whiteout: the path is hidden (a deleted file, or stale bytecode).
    Whiteout(String),
    /// A file whose bytes are read only when the layer is written (an entry of a wheel that
    /// may be hundreds of MB): never held whole in memory.
    Stream(Box<Streamed>),
}

/// Opens the bytes of a [`Streamed`] file afresh; called once per layer write.
pub type Opener = Arc<dyn Fn() -> std::io::Result<Box<dyn Read + Send>> + Send + Sync>;

/// A file written from a reader: the header (`entry.content` empty), the size and sha256 the
/// reader must give (the layer writer refuses other bytes), and how to open it.
#[derive(Clone)]
pub struct Streamed {
    pub entry: FileEntry,
    pub size: u64,
    /// Hex sha256 of the bytes.
    pub sha256: String,
    pub open: Opener,
}

impl std::fmt::Debug for Streamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streamed")
            .field("path", &self.entry.path)
            .field("mode", &self.entry.mode)
            .field("size", &self.size)
            .field("sha256", &self.sha256)
            .finish()
    }
}

impl Change {
    /// The path written or hidden.
    pub fn path(&self) -> &str {
        match self {
            Change::Write(e) => &e.path,
            Change::Whiteout(p) => p,
            Change::Stream(s) => &s.entry.path,
        }
    }

    /// The hex sha256 of what the change writes (`None` for a whiteout).
    pub fn written_sha256(&self) -> Option<String> {
        match self {
            Change::Write(e) => Some(crate::digest::sha256(&e.content)),
            Change::Stream(s) => Some(format!("sha256:{}", s.sha256)),
            Change::Whiteout(_) => None,
        }
    }
}

/// What a patch found in the image, for the report and the digest map, whatever it decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct About {
    /// The file the patch is about (`/usr/.../multi_connector.py`).
    pub file: Option<String>,
    /// The version of the patch's package there.
    pub version: Option<String>,
    /// The shape that matched, for kinds that know shapes.
    pub shape: Option<String>,
}

/// What one patch decided for one image (one platform).
#[derive(Debug, Clone)]
pub struct Verdict {
    pub outcome: Outcome,
    /// One line saying why; for a patch that changes something, its notes joined.
    pub reason: String,
    /// What is worth telling about a change (a hunk applied at an offset, the shape used).
    pub notes: Vec<String>,
    pub about: About,
    /// Files to write and paths to hide, in one layer (empty unless patched; empty for kinds
    /// that only edit the config).
    pub changes: Vec<Change>,
    /// The edited config, for kinds that edit it.
    pub config: Option<Value>,
    /// What the change may break without being refused (installed distributions whose
    /// requirements a downgrade no longer meets), for the summary and the digest map.
    pub warnings: Vec<String>,
    /// The wheels the change installs, for the digest map and provenance.
    pub installed: Vec<crate::patch::dist::InstalledWheel>,
}

impl Verdict {
    fn with(outcome: Outcome, reason: String) -> Self {
        Verdict {
            outcome,
            reason,
            notes: Vec::new(),
            about: About::default(),
            changes: Vec::new(),
            config: None,
            warnings: Vec::new(),
            installed: Vec::new(),
        }
    }

    /// Something to append: changes for one layer and/or an edited config.
    pub fn patched(changes: Vec<Change>, config: Option<Value>, notes: Vec<String>) -> Self {
        Verdict {
            reason: notes.join("; "),
            notes,
            changes,
            config,
            ..Verdict::with(Outcome::Patched, String::new())
        }
    }

    pub fn already_patched(reason: impl Into<String>) -> Self {
        Verdict::with(Outcome::AlreadyPatched, reason.into())
    }

    pub fn not_affected(reason: impl Into<String>) -> Self {
        Verdict::with(Outcome::NotAffected, reason.into())
    }

    pub fn refused(reason: impl Into<String>) -> Self {
        Verdict::with(Outcome::Refused, reason.into())
    }

    /// The same verdict, saying what it found.
    pub fn about(mut self, about: About) -> Self {
        self.about = about;
        self
    }

    /// One line for people: for a change, how many and its notes; else the reason.
    pub fn summary(&self) -> String {
        if self.outcome != Outcome::Patched {
            return self.reason.clone();
        }
        let mut s = format!("patched ({} change(s))", self.changes.len());
        if !self.notes.is_empty() {
            s.push_str(": ");
            s.push_str(&self.notes.join("; "));
        }
        s
    }
}

/// What `verify` knows of a platform independently of a provenance statement: the file path a
/// patch wrote and the sha256 of the original and patched copies it read.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// The patch that writes `file`: a statement of other patches (stacked in a later run)
    /// does not name it.
    pub by: Option<String>,
    pub file: Option<String>,
    pub original_file: Option<String>,
    pub patched_file: Option<String>,
}

/// What checking one patch on a patched image found.
#[derive(Debug, Clone, Default)]
pub struct Checked {
    /// Each disagreement, one sentence each.
    pub problems: Vec<String>,
    /// The file the patch is about, as the image shows it.
    pub file: Option<String>,
    pub seen: Seen,
}
