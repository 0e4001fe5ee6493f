//! The `shapes` kind: block find/replace with `${args}` alternatives (the built-in fix). The spec
//! format read from `patches/<id>/patch.toml`, the pure function that decides, from a file's
//! bytes alone, whether it is patched, already patched, not affected, or refused, and its
//! implementation of the patch interface. No I/O here, so every shape decision is table-testable.

use serde_json::json;

mod check;
mod spec;
#[cfg(test)]
mod tests;
mod text;

pub use spec::{Block, FileDecision, FileSpec, Guard, PatchSpec, Shape};

use crate::patch::error::Error;
use crate::patch::kind::{Description, Patch, PatchKind};
use crate::patch::meta::{self, Meta};
use crate::patch::outcome::Outcome;
use crate::patch::source::Source;
use crate::patch::tree::{Layered, Tree};
use crate::patch::verdict::{About, Change, Checked, Verdict};
use crate::scan::{EntryKind, FileEntry};

/// The `shapes` kind behind the patch interface: the spec plus its shared fields.
#[derive(Debug, Clone)]
pub struct ShapesPatch {
    pub meta: Meta,
    pub spec: PatchSpec,
}

/// Loads and checks a `shapes` patch.toml: the spec plus the fields every kind shares.
pub fn load(src: &Source<'_>) -> Result<Patch, Error> {
    ShapesPatch::load(src).map(Patch::new)
}

impl ShapesPatch {
    fn load(src: &Source<'_>) -> Result<Self, Error> {
        let (text, origin) = (src.text, src.origin);
        let spec = PatchSpec::parse(text, origin)?;
        if spec.kind.as_deref().is_some_and(|k| k != "shapes") {
            return Err(Error::new(
                crate::patch::error::ErrorKind::Invalid,
                format!("{origin}: kind must be \"shapes\" here"),
            ));
        }
        let meta = meta::read(src, "shapes")?;
        Ok(ShapesPatch { meta, spec })
    }

    /// Every file the patch changes (the top-level target first).
    pub fn targets(&self) -> Vec<String> {
        self.spec.per_file().into_iter().map(|s| s.target).collect()
    }

    /// What the image shows of the patch's (first) file, whatever is decided about it.
    fn about(&self, tree: &dyn Tree) -> About {
        let Some(path) = tree.find(&self.spec.target).into_iter().next() else {
            return About::default();
        };
        let root = path
            .strip_suffix(&self.spec.target)
            .unwrap_or("")
            .trim_end_matches('/');
        About {
            version: tree.package_version(root, &self.spec.package),
            file: Some(format!("/{path}")),
            shape: None,
        }
    }
}

impl PatchKind for ShapesPatch {
    fn meta(&self) -> &Meta {
        &self.meta
    }

    fn anchors(&self) -> Vec<String> {
        self.targets()
    }

    fn writes(&self) -> Vec<String> {
        self.targets()
    }

    fn required_in_layer(&self) -> Vec<String> {
        vec![self.spec.target.clone()]
    }

    fn wanted(&self) -> Vec<String> {
        let mut w = self.targets();
        w.extend(self.spec.guards.iter().map(|g| g.target.clone()));
        w
    }

    /// Each file decided on its own (`decide_one`), then together: a refusal of any refuses
    /// the patch; files patched beside files already carrying it are a half-applied patch,
    /// refused as the `diff` kind refuses it; a file with the upstream fix (or predating the
    /// bug) is left as it is.
    fn decide(&self, tree: &dyn Tree) -> Verdict {
        let about = self.about(tree);
        let per_file = self.spec.per_file();
        let verdicts: Vec<Verdict> = per_file
            .iter()
            .map(|s| decide_one(s, &self.meta, tree))
            .collect();
        let shape = verdicts.iter().find_map(|v| v.about.shape.clone());
        let v = combine(verdicts);
        let about = About {
            shape: shape.filter(|_| v.outcome == Outcome::Patched),
            ..about
        };
        v.about(about)
    }

    fn check(&self, image: &dyn Layered) -> Checked {
        let mut checked = Checked::default();
        for one in self.spec.per_file() {
            check::shape_seen(image, &one, &mut checked);
        }
        checked
    }

    fn describe(&self) -> Description {
        let s = &self.spec;
        let mut lines = vec![
            ("target", format!("**/{}", s.target)),
            ("affected", self.meta.affected_text()),
            (
                "shapes",
                s.shapes
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        ];
        for g in &s.guards {
            lines.push(("guard", format!("**/{} ({})", g.target, g.class)));
        }
        let fields = json!({
            "target": s.target,
            "shapes": s.shapes.iter().map(|x| x.name.clone()).collect::<Vec<_>>(),
            "guards": s.guards.iter().map(|x| x.target.clone()).collect::<Vec<_>>(),
        });
        Description {
            fields: fields.as_object().cloned().unwrap_or_default(),
            lines,
        }
    }
}

/// Several files' verdicts as the patch's: one file's as it is; else a refusal of any, a
/// half-applied patch refused, all patched together, all already patched, or not affected.
fn combine(mut verdicts: Vec<Verdict>) -> Verdict {
    if verdicts.len() == 1 {
        return verdicts.remove(0);
    }
    if let Some(r) = verdicts.iter().find(|v| v.outcome == Outcome::Refused) {
        return r.clone();
    }
    let reasons = |pick: Option<Outcome>| -> Vec<String> {
        verdicts
            .iter()
            .filter(|v| pick.is_none_or(|o| v.outcome == o))
            .map(Verdict::summary)
            .collect()
    };
    let patched = reasons(Some(Outcome::Patched));
    let already = reasons(Some(Outcome::AlreadyPatched));
    match (patched.is_empty(), already.is_empty()) {
        (false, false) => Verdict::refused(format!(
            "partly applied: {} would be patched but {}; refusing to complete it by guessing",
            patched.join("; "),
            already.join("; ")
        )),
        (false, true) => {
            let mut changes = Vec::new();
            let mut notes = Vec::new();
            for v in verdicts {
                changes.extend(v.changes);
                notes.extend(v.notes);
            }
            Verdict::patched(changes, None, notes)
        }
        (true, false) => Verdict::already_patched(already.join("; ")),
        (true, true) => Verdict::not_affected(reasons(None).join("; ")),
    }
}

/// The one visible copy of `target`, or why there is not exactly one.
fn only_copy(target: &str, tree: &dyn Tree) -> Result<String, String> {
    let paths = tree.find(target);
    match paths.as_slice() {
        [] => Err(tree.explain_missing(target)),
        [one] => Ok(one.clone()),
        many => {
            // A few are named: a hostile layer may hold thousands.
            let more = match many.len() {
                n if n > 3 => format!(", and {} more", n - 3),
                _ => String::new(),
            };
            Err(format!(
                "{} copies of the target (/{}{more}); refusing to guess which one runs",
                many.len(),
                many[..many.len().min(3)].join(", /")
            ))
        }
    }
}

/// The entry at `path`, which must be a regular file (links are refused, not followed).
fn regular_file(path: &str, tree: &dyn Tree) -> Result<FileEntry, String> {
    let entry = match tree.file(path) {
        Ok(Some(e)) => e,
        Ok(None) => return Err(format!("/{path} disappeared while reading")),
        Err(e) => return Err(e.to_string()),
    };
    let file = format!("/{path}");
    match &entry.kind {
        EntryKind::Regular => Ok(entry),
        EntryKind::Symlink(to) => Err(format!(
            "{file} is a symbolic link to {to:?}; links are refused, not followed"
        )),
        EntryKind::Hardlink(to) => Err(format!(
            "{file} is a hard link to {to:?}; links are refused, not followed"
        )),
        EntryKind::Other(k) => Err(format!("{file} is a {k} entry, not a regular file")),
    }
}

/// The decision for one file, the same the registry path makes: exactly one visible target, no
/// links, the shape engine on its bytes, then the guards; the write keeps the original header.
fn decide_one(spec: &PatchSpec, meta: &Meta, tree: &dyn Tree) -> Verdict {
    let path = match only_copy(&spec.target, tree) {
        Ok(p) => p,
        Err(why) => return Verdict::refused(why),
    };
    let entry = match regular_file(&path, tree) {
        Ok(e) => e,
        Err(why) => return Verdict::refused(why),
    };
    let file = format!("/{path}");
    let d = spec.decide(&entry.content);
    let Some((shape, bytes)) = d.patched else {
        return match d.outcome {
            Outcome::AlreadyPatched => {
                Verdict::already_patched(format!("{file} already carries patch {}", spec.id))
            }
            Outcome::NotAffected => Verdict::not_affected(format!("{file}: {}", d.reason)),
            _ => Verdict::refused(format!("{file}: {}", d.reason)),
        };
    };
    for guard in &spec.guards {
        for gpath in tree.find(&guard.target) {
            if let Ok(Some(g)) = tree.file(&gpath) {
                if let Some(why) = spec.check_guard(guard, &g.content) {
                    return Verdict::refused(format!("/{gpath}: {why}"));
                }
            }
        }
    }
    let mtime = meta.mtime_replacing(&entry);
    let mut changes = vec![Change::Write(FileEntry {
        content: std::sync::Arc::new(bytes),
        mtime,
        ..entry
    })];
    changes.extend(tree.stale_bytecode(&path).into_iter().map(Change::Whiteout));
    let notes = vec![format!("{file}: shape {shape} patched")];
    Verdict::patched(changes, None, notes).about(About {
        shape: Some(shape),
        ..About::default()
    })
}
