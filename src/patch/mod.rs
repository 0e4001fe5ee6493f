//! The patch engine behind one interface: a patch of any kind looks at what an image shows (an
//! [`ImageView`]: visible files by path, the config) and returns one [`Verdict`]: already
//! patched, not affected, refused with a reason, or patched with the list of file writes and
//! whiteouts (and, for `env`, the edited config) to append. Scan, layer, push and digest-map
//! code only ever see that list, so a new kind is one new module here (ripgrep's `Matcher`
//! trait with several engines behind it is the model).
//!
//! Kinds: [`shapes`] (block find/replace, the built-in fix), [`diff`] (a unified diff applied
//! relative to a Python package's root, via the pure [`unified`] parser/applier), and [`env`]
//! (the config's `Env`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::scan::FileEntry;
use crate::version::VersionRange;

pub mod diff;
pub mod dir;
pub mod env;
pub mod shapes;
pub mod unified;

pub use shapes::{Block, Decision, Guard, Outcome, PatchSpec, Shape};

/// What every patch declares beside its kind's own fields (the `patch.toml` contract).
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    pub kind: Kind,
    pub title: String,
    /// Services named in the tag (`vllm`, `sglang`, ...); empty means all.
    pub services: Vec<String>,
    /// Backends (`cuda`, `rocm`, `cann`); empty means all.
    pub backends: Vec<String>,
    /// The Python package a diff is relative to and whose version `affected` tests.
    pub package: Option<String>,
    pub affected: Option<VersionRange>,
    /// RFC 3339 mtime given to written files (fixed, so layers are reproducible).
    pub mtime: String,
    /// The `patch.toml` it came from (built-in: `patches/<id>/patch.toml`).
    pub origin: String,
    /// sha256 of the patch's definition (`patch.toml`, and the diff a `diff` patch names), for
    /// the provenance statement; set by [`load`].
    pub definition_digest: String,
}

impl Meta {
    /// Whether a tag of this service and backend is one this patch is for (discovery).
    pub fn selects(&self, service: &str, backend: &str) -> bool {
        self.for_service(service) && self.for_backend(backend)
    }

    /// Whether this patch is for the service a tag names (an empty list: every service).
    pub fn for_service(&self, service: &str) -> bool {
        self.services.is_empty() || self.services.iter().any(|s| s == service)
    }

    /// Whether this patch is for the backend a tag names (an empty list: every backend).
    pub fn for_backend(&self, backend: &str) -> bool {
        self.backends.is_empty() || self.backends.iter().any(|b| b == backend)
    }
}

/// The patch kinds `patch.toml` can declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Shapes,
    Diff,
    Env,
}

impl Kind {
    /// The name `patch.toml` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Shapes => "shapes",
            Kind::Diff => "diff",
            Kind::Env => "env",
        }
    }
}

/// What an image shows a patch: the overlay view of its layers (or an unpacked tree) and its
/// config. Paths are relative to `/`, without a leading slash.
pub trait ImageView {
    /// Every visible path that ends with `suffix` on whole path components.
    fn find(&self, suffix: &str) -> Vec<String>;
    /// The visible entry at `path` (content read for regular files), if any.
    fn file(&self, path: &str) -> Result<Option<FileEntry>, String>;
    /// Visible compiled bytecode of the module at `path` (`__pycache__/<stem>.*.pyc`), which
    /// must be hidden when the module changes.
    fn stale_bytecode(&self, path: &str) -> Vec<String>;
    /// The version of `package` installed at `root` (its dist-info, or `<package>/_version.py`).
    fn package_version(&self, root: &str, package: &str) -> Option<String>;
    /// The image config as JSON, when this view has one.
    fn config(&self) -> Option<&serde_json::Value>;
    /// Why no copy of `suffix` is visible (a view that knows what hides one says so).
    fn explain_missing(&self, suffix: &str) -> String {
        format!("no visible **/{suffix}")
    }
}

/// One change to the file system the image shows.
#[derive(Debug, Clone)]
pub enum Change {
    /// A file at `entry.path` with `entry.content`; mode, owner and names come from the file it
    /// replaces (0644 root:root for a created file), the mtime is the patch's.
    Write(FileEntry),
    /// A whiteout: the path is hidden (a deleted file, or stale bytecode).
    Whiteout(String),
}

impl Change {
    /// The path written or hidden.
    pub fn path(&self) -> &str {
        match self {
            Change::Write(e) => &e.path,
            Change::Whiteout(p) => p,
        }
    }
}

/// What a patch decided for one image (one platform).
#[derive(Debug, Clone)]
pub enum Verdict {
    Patched {
        /// Files to write and paths to hide, in one layer (empty for `env`).
        changes: Vec<Change>,
        /// The edited config, for kinds that edit it (`env`).
        config: Option<serde_json::Value>,
        /// What is worth telling (a hunk applied at an offset, the shape used).
        notes: Vec<String>,
    },
    AlreadyPatched {
        reason: String,
    },
    NotAffected {
        reason: String,
    },
    Refused {
        reason: String,
    },
}

impl Verdict {
    /// The digest map's outcome for this verdict.
    pub fn outcome(&self) -> Outcome {
        match self {
            Verdict::Patched { .. } => Outcome::Patched,
            Verdict::AlreadyPatched { .. } => Outcome::AlreadyPatched,
            Verdict::NotAffected { .. } => Outcome::NotAffected,
            Verdict::Refused { .. } => Outcome::Refused,
        }
    }

    /// One line saying why.
    pub fn reason(&self) -> String {
        match self {
            Verdict::Patched { notes, changes, .. } => {
                let mut s = format!("patched ({} change(s))", changes.len());
                if !notes.is_empty() {
                    s.push_str(": ");
                    s.push_str(&notes.join("; "));
                }
                s
            }
            Verdict::AlreadyPatched { reason }
            | Verdict::NotAffected { reason }
            | Verdict::Refused { reason } => reason.clone(),
        }
    }
}

/// One implementation per kind.
pub trait PatchKind: Send + Sync + std::fmt::Debug {
    fn meta(&self) -> &Meta;
    /// Path suffixes a scan must show for [`PatchKind::decide`] (files to patch, guards).
    fn wanted(&self) -> Vec<String>;
    /// The suffixes whose top-most visible copies locate what the patch changes: a top-down
    /// scan may stop once it has seen them (guards and files a diff creates are not anchors).
    fn anchors(&self) -> Vec<String> {
        self.wanted()
    }
    /// Suffixes of the files this patch may write or hide, for `verify` to tell its layer's
    /// entries from strays.
    fn writes(&self) -> Vec<String> {
        self.wanted()
    }
    fn decide(&self, image: &dyn ImageView) -> Verdict;
}

/// A loaded patch of any kind.
#[derive(Debug, Clone)]
pub enum Patch {
    Shapes(Box<shapes::ShapesPatch>),
    Diff(diff::DiffPatch),
    Env(env::EnvPatch),
}

impl Patch {
    /// The kind's implementation of the interface.
    pub fn kind(&self) -> &dyn PatchKind {
        match self {
            Patch::Shapes(p) => p.as_ref(),
            Patch::Diff(p) => p,
            Patch::Env(p) => p,
        }
    }

    pub fn meta(&self) -> &Meta {
        self.kind().meta()
    }

    pub fn decide(&self, image: &dyn ImageView) -> Verdict {
        self.kind().decide(image)
    }
}

/// An error in a patch folder, named by file and line.
pub fn at_line(origin: &str, text: &str, offset: usize, message: &str) -> String {
    let line = text[..offset.min(text.len())].matches('\n').count() + 1;
    format!("{origin}:{line}: {message}")
}

/// A toml error as `file:line: message`.
pub fn toml_error(origin: &str, text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => at_line(origin, text, span.start, e.message().trim()),
        None => format!("{origin}: {}", e.message().trim()),
    }
}

#[derive(Deserialize)]
struct KindOnly {
    kind: Option<toml::Spanned<String>>,
}

/// Loads one `patch.toml` (`text`, read from `origin`), whose other files live in `folder`
/// (`None` for built-in patches, which have no other files). Everything is validated here, so
/// a bad patch stops the run before any registry is touched.
pub fn load(text: &str, origin: &str, folder: Option<&Path>) -> Result<Patch, String> {
    let head: KindOnly = toml::from_str(text).map_err(|e| toml_error(origin, text, &e))?;
    let kind_span = head.kind.as_ref().map_or(0, |s| s.span().start);
    let kind = match head.kind.as_ref().map(|s| s.get_ref().as_str()) {
        None | Some("shapes") => Kind::Shapes,
        Some("diff") => Kind::Diff,
        Some("env") => Kind::Env,
        Some(other) => {
            return Err(at_line(
                origin,
                text,
                kind_span,
                &format!("unknown kind {other:?} (expected \"shapes\", \"diff\" or \"env\")"),
            ))
        }
    };
    let mut patch = match kind {
        Kind::Shapes => {
            shapes::ShapesPatch::load(text, origin).map(|p| Patch::Shapes(Box::new(p)))?
        }
        Kind::Diff => diff::DiffPatch::load(text, origin, folder).map(Patch::Diff)?,
        Kind::Env => env::EnvPatch::load(text, origin).map(Patch::Env)?,
    };
    let mut definition = text.as_bytes().to_vec();
    if let Patch::Diff(d) = &patch {
        definition.extend_from_slice(&d.source);
    }
    let digest = crate::digest::sha256(&definition);
    match &mut patch {
        Patch::Shapes(p) => p.meta.definition_digest = digest,
        Patch::Diff(p) => p.meta.definition_digest = digest,
        Patch::Env(p) => p.meta.definition_digest = digest,
    }
    Ok(patch)
}

/// Loads the patch folder at `dir` (`dir/patch.toml` and the files it names).
pub fn load_folder(dir: &Path) -> Result<Patch, String> {
    let toml_path: PathBuf = dir.join("patch.toml");
    let text = std::fs::read_to_string(&toml_path)
        .map_err(|e| format!("cannot read {}: {e}", toml_path.display()))?;
    load(&text, &toml_path.display().to_string(), Some(dir))
}

/// Checks the fields every kind shares.
pub(crate) fn check_common(
    origin: &str,
    text: &str,
    id: &toml::Spanned<String>,
    services: &[String],
    backends: &[String],
    mtime: &str,
) -> Result<(), String> {
    let ok_id = !id.get_ref().is_empty()
        && id
            .get_ref()
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if !ok_id {
        return Err(at_line(
            origin,
            text,
            id.span().start,
            &format!(
                "id {:?} must be lowercase letters, digits, '-' or '.' (it goes into a config label)",
                id.get_ref()
            ),
        ));
    }
    for b in backends {
        if !matches!(b.as_str(), "cuda" | "rocm" | "cann") {
            return Err(format!(
                "{origin}: backends: unknown backend {b:?} (expected cuda, rocm or cann)"
            ));
        }
    }
    for s in services {
        if s.is_empty()
            || !s
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(format!("{origin}: services: {s:?} is not a service name as tags spell it (vllm, sglang, ...)"));
        }
    }
    crate::layer::parse_rfc3339(mtime).map_err(|e| format!("{origin}: mtime: {e}"))?;
    Ok(())
}

/// Where an installed package's version is read, relative to `root` (the folder holding
/// `<package>/`): whether `path` is its dist-info `METADATA` (`<root>/<dist>-*.dist-info/METADATA`,
/// `-` in the name written `_`), and the path of its `<package>/_version.py`. Shared by every view.
pub fn is_dist_metadata(root: &str, package: &str, path: &str) -> bool {
    let dist = package.replace('-', "_");
    let rest = if root.is_empty() {
        Some(path)
    } else {
        path.strip_prefix(root).and_then(|p| p.strip_prefix('/'))
    };
    rest.and_then(|r| r.strip_suffix(".dist-info/METADATA"))
        .is_some_and(|d| !d.contains('/') && d.starts_with(&format!("{dist}-")))
}

/// The `<package>/_version.py` under `root` (see [`is_dist_metadata`]).
pub fn version_py(root: &str, package: &str) -> String {
    if root.is_empty() {
        format!("{package}/_version.py")
    } else {
        format!("{root}/{package}/_version.py")
    }
}

/// Default mtime of files written by `diff` patches that set none: fixed, so the same patch
/// gives the same layer.
pub const DEFAULT_MTIME: &str = "2000-01-01T00:00:00Z";

/// An image view held in memory, for the kinds' unit tests.
#[cfg(test)]
pub(crate) mod testview {
    use std::collections::BTreeMap;

    use super::ImageView;
    use crate::scan::{EntryKind, FileEntry};

    /// A tree in memory: path -> content.
    pub struct Mem(pub BTreeMap<String, Vec<u8>>, pub Option<String>);

    impl ImageView for Mem {
        fn find(&self, suffix: &str) -> Vec<String> {
            self.0
                .keys()
                .filter(|p| crate::scan::has_suffix(p, suffix))
                .cloned()
                .collect()
        }
        fn file(&self, path: &str) -> Result<Option<FileEntry>, String> {
            Ok(self.0.get(path).map(|c| FileEntry {
                path: path.to_owned(),
                kind: EntryKind::Regular,
                mode: 0o640,
                uid: 7,
                gid: 8,
                uname: None,
                gname: None,
                mtime: 5,
                content: std::sync::Arc::new(c.clone()),
            }))
        }
        fn stale_bytecode(&self, path: &str) -> Vec<String> {
            let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
            let stem = file.trim_end_matches(".py");
            self.0
                .keys()
                .filter(|p| p.starts_with(&format!("{dir}/__pycache__/{stem}.")))
                .cloned()
                .collect()
        }
        fn package_version(&self, _root: &str, _package: &str) -> Option<String> {
            self.1.clone()
        }
        fn config(&self) -> Option<&serde_json::Value> {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_kind_and_bad_toml_name_file_and_line() {
        let e = load(
            "id = \"x\"\ntitle = \"t\"\nkind = \"sed\"\n",
            "f/patch.toml",
            None,
        )
        .expect_err("unknown kind");
        assert!(e.starts_with("f/patch.toml:3: unknown kind \"sed\""), "{e}");
        let e = load("id = \"x\"\ntitle = \n", "f/patch.toml", None).expect_err("bad toml");
        assert!(e.starts_with("f/patch.toml:2: "), "{e}");
    }

    #[test]
    fn selection_defaults_to_all() {
        let Patch::Env(p) = load(
            "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\nbackends = [\"cuda\"]\n[env]\nset = { A = \"1\" }\n",
            "e/patch.toml",
            None,
        )
        .expect("loads") else {
            panic!("env kind")
        };
        assert!(p.meta().selects("vllm", "cuda"));
        assert!(p.meta().selects("sglang", "cuda"));
        assert!(!p.meta().selects("vllm", "rocm"));
    }
}
