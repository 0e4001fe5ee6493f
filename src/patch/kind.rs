//! The one interface every patch kind implements ([`PatchKind`]), and [`Patch`], a loaded patch
//! of any kind. The planner, `verify`, the pusher and the binary only use this interface, so a
//! new kind is a new folder implementing it plus one line in the kinds table (`kinds.rs`);
//! ripgrep's `Matcher` trait with several engines behind it is the model.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use serde_json::Value;

use crate::patch::dist::Input;
use crate::patch::error::Error;
use crate::patch::meta::Meta;
use crate::patch::outcome::Outcome;
use crate::patch::request::{Request, Resolution};
use crate::patch::tree::{Layered, Tree};
use crate::patch::verdict::{Checked, Verdict};

/// How a kind describes a patch in `runner-patch patches`: fields for `--json` and labelled
/// lines for people, in order.
#[derive(Debug, Clone, Default)]
pub struct Description {
    pub fields: serde_json::Map<String, Value>,
    pub lines: Vec<(&'static str, String)>,
}

/// One implementation per kind.
pub trait PatchKind: Send + Sync + Debug + Any {
    fn meta(&self) -> &Meta;
    /// Path suffixes a scan must show for [`PatchKind::decide`] (files to patch, guards).
    fn wanted(&self) -> Vec<String>;
    /// Exact paths (relative to `/`, as the patch names them) a scan must show: a scan for any
    /// reads every layer and resolves links on the way (`scan::links`).
    fn paths(&self) -> Vec<String> {
        Vec::new()
    }
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
    /// Whether an appended layer of this patch may hold an entry at `path` (relative to `/`,
    /// whiteouts named by the path they hide): `verify` names any other entry a stray. By
    /// default a path ending with one of [`PatchKind::writes`]; a kind whose files are known
    /// only from its inputs (a wheel's) says so itself.
    fn may_write(&self, path: &str) -> bool {
        self.writes()
            .iter()
            .any(|w| crate::scan::has_suffix(path, w))
    }
    /// Suffixes of files an appended layer of this patch must hold (`verify` names a layer
    /// without them).
    fn required_in_layer(&self) -> Vec<String> {
        Vec::new()
    }
    /// Whether `decide` reads the installed distributions (`Tree::dists`): a scan for them reads
    /// every layer.
    fn distributions(&self) -> bool {
        false
    }
    /// Paths (relative to `/`) whose visible bytes `decide` or `check` must hash, given what a
    /// first read showed: the planner reads those files again, hashing them as they stream by,
    /// and the tree then answers `Tree::hashed` for them.
    fn hashes(&self, _tree: &dyn Tree) -> Vec<String> {
        Vec::new()
    }
    /// What the patch fetches from outside before any image is read (a lock's wheels by URL).
    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }
    /// What this patch needs resolved for the platform `tree` shows before it can decide
    /// (requirement lines: the resolver is run by the planner, not by the kind); `None` for
    /// kinds that need nothing, `Err` a refusal of the platform.
    fn request(&self, _tree: &dyn Tree) -> Option<Result<Request, String>> {
        None
    }
    /// The patch as it stands for one platform once its [`PatchKind::request`] was answered
    /// (`Err`: why the resolver could not answer, which the patch then refuses with).
    fn resolved(&self, answer: Result<Resolution, String>) -> Patch {
        let _ = answer;
        unreachable_resolution(self.meta())
    }
    /// The decision on what an image shows: the whole patch logic, pure over the tree.
    fn decide(&self, tree: &dyn Tree) -> Verdict;
    /// Whether applying the patch appends a layer (kinds that only edit the config do not).
    fn adds_layer(&self) -> bool {
        true
    }
    /// The config as this patch leaves it (`None`: unchanged), for `verify` to replay what a
    /// run did to the original config.
    fn edit_config(&self, _config: &Value) -> Result<Option<Value>, Error> {
        Ok(None)
    }
    /// `verify`'s check that a patched image carries this patch: by default, deciding again
    /// on what the image shows must find it already patched.
    fn check(&self, image: &dyn Layered) -> Checked {
        let mut checked = Checked::default();
        if image.refusal().is_some() {
            return checked;
        }
        let v = self.decide(image);
        if v.outcome != Outcome::AlreadyPatched {
            checked.problems.push(format!(
                "the image does not carry what patch {} makes ({}: {})",
                self.meta().id,
                v.outcome,
                v.summary()
            ));
        }
        checked
    }
    /// What `runner-patch patches` shows of this patch beyond the shared fields.
    fn describe(&self) -> Description;
}

/// A kind that makes no request is never handed an answer; should it be, the patch refuses.
fn unreachable_resolution(meta: &Meta) -> Patch {
    Patch::new(Refusing {
        meta: meta.clone(),
        why: format!("patch {} asks nothing to be resolved", meta.id),
    })
}

/// A patch that refuses every platform with one reason.
#[derive(Debug)]
pub struct Refusing {
    pub meta: Meta,
    pub why: String,
}

impl PatchKind for Refusing {
    fn meta(&self) -> &Meta {
        &self.meta
    }
    fn wanted(&self) -> Vec<String> {
        Vec::new()
    }
    fn decide(&self, _tree: &dyn Tree) -> Verdict {
        Verdict::refused(self.why.clone())
    }
    fn describe(&self) -> Description {
        Description::default()
    }
}

/// A loaded patch of any kind; cheap to clone (the kind is shared).
#[derive(Debug, Clone)]
pub struct Patch(Arc<dyn PatchKind>);

impl Patch {
    pub fn new(kind: impl PatchKind + 'static) -> Self {
        Patch(Arc::new(kind))
    }

    /// The kind's implementation of the interface.
    pub fn kind(&self) -> &dyn PatchKind {
        self.0.as_ref()
    }

    pub fn meta(&self) -> &Meta {
        self.0.meta()
    }

    pub fn decide(&self, tree: &dyn Tree) -> Verdict {
        self.0.decide(tree)
    }

    /// What `runner-patch patches --json` shows: the shared fields, then the kind's own.
    pub fn describe_json(&self) -> Value {
        let m = self.meta();
        let mut v = serde_json::json!({
            "id": m.id, "kind": m.kind, "title": m.title,
            "services": m.services, "backends": m.backends,
            "package": m.package, "affected": m.affected.as_ref().map(|r| r.to_string()),
            "origin": m.origin,
        });
        if let Some(o) = v.as_object_mut() {
            o.extend(self.0.describe().fields);
        }
        v
    }

    /// What `runner-patch patches` shows: the id, the title, then the kind's labelled lines
    /// (`  label:    value`).
    pub fn describe_text(&self) -> String {
        let m = self.meta();
        let mut out = format!("{}\n  {}", m.id, m.title);
        for (label, value) in self.0.describe().lines {
            out.push_str(&format!("\n  {:<10}{value}", format!("{label}:")));
        }
        out
    }

    /// The kind's own type, for a command that works with one kind only (`patch-file`).
    pub fn downcast<T: PatchKind>(&self) -> Option<&T> {
        let any: &dyn Any = self.0.as_ref();
        any.downcast_ref::<T>()
    }
}
