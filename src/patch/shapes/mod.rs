//! The `shapes` kind: block find/replace with `${args}` alternatives (the built-in fix). The spec
//! format read from `patches/<id>/patch.toml`, the pure function that decides, from a file's
//! bytes alone, whether it is patched, already patched, not affected, or refused, and its
//! implementation of the patch interface. No I/O here, so every shape decision is table-testable.

use serde::Deserialize;

mod spec;
#[cfg(test)]
mod tests;
mod text;

pub use spec::{Block, Decision, FileSpec, Guard, Outcome, PatchSpec, Shape};

/// The `shapes` kind behind the patch interface: the spec plus its shared fields.
#[derive(Debug, Clone)]
pub struct ShapesPatch {
    pub meta: super::Meta,
    pub spec: PatchSpec,
}

impl ShapesPatch {
    /// Loads and checks a `shapes` patch.toml: the spec plus the fields every kind shares.
    pub fn load(text: &str, origin: &str) -> Result<Self, String> {
        let spec = PatchSpec::parse(text, origin)?;
        if spec.kind.as_deref().is_some_and(|k| k != "shapes") {
            return Err(format!("{origin}: kind must be \"shapes\" here"));
        }
        let id: toml::Spanned<String> = toml::from_str::<IdOnly>(text)
            .map_err(|e| super::toml_error(origin, text, &e))?
            .id;
        super::check_common(
            origin,
            text,
            &id,
            &spec.services,
            &spec.backends,
            &spec.mtime,
        )?;
        Ok(ShapesPatch {
            meta: super::Meta {
                id: spec.id.clone(),
                kind: super::Kind::Shapes,
                title: spec.title.clone(),
                services: spec.services.clone(),
                backends: spec.backends.clone(),
                package: Some(spec.package.clone()),
                affected: Some(spec.affected.clone()),
                mtime: spec.mtime.clone(),
                origin: origin.to_owned(),
                definition_digest: String::new(),
            },
            spec,
        })
    }
}

#[derive(Deserialize)]
struct IdOnly {
    id: toml::Spanned<String>,
}

impl super::PatchKind for ShapesPatch {
    fn meta(&self) -> &super::Meta {
        &self.meta
    }

    fn anchors(&self) -> Vec<String> {
        self.targets()
    }

    fn writes(&self) -> Vec<String> {
        self.targets()
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
    fn decide(&self, image: &dyn super::ImageView) -> super::Verdict {
        use super::Verdict;
        let per_file = self.spec.per_file();
        if per_file.len() == 1 {
            return decide_one(&per_file[0], image);
        }
        let verdicts: Vec<Verdict> = per_file.iter().map(|s| decide_one(s, image)).collect();
        if let Some(r) = verdicts
            .iter()
            .find(|v| matches!(v, Verdict::Refused { .. }))
        {
            return r.clone();
        }
        let reasons = |pick: fn(&Verdict) -> bool| -> Vec<String> {
            verdicts
                .iter()
                .filter(|v| pick(v))
                .map(Verdict::reason)
                .collect()
        };
        let patched = reasons(|v| matches!(v, Verdict::Patched { .. }));
        let already = reasons(|v| matches!(v, Verdict::AlreadyPatched { .. }));
        match (patched.is_empty(), already.is_empty()) {
            (false, false) => Verdict::Refused {
                reason: format!(
                    "partly applied: {} would be patched but {}; refusing to complete it by guessing",
                    patched.join("; "),
                    already.join("; ")
                ),
            },
            (false, true) => {
                let mut changes = Vec::new();
                let mut notes = Vec::new();
                for v in verdicts {
                    if let Verdict::Patched { changes: c, notes: n, .. } = v {
                        changes.extend(c);
                        notes.extend(n);
                    }
                }
                Verdict::Patched {
                    changes,
                    config: None,
                    notes,
                }
            }
            (true, false) => Verdict::AlreadyPatched {
                reason: already.join("; "),
            },
            (true, true) => Verdict::NotAffected {
                reason: reasons(|_| true).join("; "),
            },
        }
    }
}

impl ShapesPatch {
    /// Every file the patch changes (the top-level target first).
    pub fn targets(&self) -> Vec<String> {
        self.spec.per_file().into_iter().map(|s| s.target).collect()
    }
}

/// The decision for one file, the same the registry path makes: exactly one visible target, no
/// links, the shape engine on its bytes, then the guards; the write keeps the original header.
fn decide_one(spec: &PatchSpec, image: &dyn super::ImageView) -> super::Verdict {
    use super::{Change, Verdict};
    let refused = |reason: String| Verdict::Refused { reason };
    let paths = image.find(&spec.target);
    let path = match paths.as_slice() {
        [] => return refused(image.explain_missing(&spec.target)),
        [one] => one.clone(),
        many => {
            // A few are named: a hostile layer may hold thousands.
            let more = match many.len() {
                n if n > 3 => format!(", and {} more", n - 3),
                _ => String::new(),
            };
            return refused(format!(
                "{} copies of the target (/{}{more}); refusing to guess which one runs",
                many.len(),
                many[..many.len().min(3)].join(", /")
            ));
        }
    };
    let entry = match image.file(&path) {
        Ok(Some(e)) => e,
        Ok(None) => return refused(format!("/{path} disappeared while reading")),
        Err(e) => return refused(e),
    };
    let file = format!("/{path}");
    match &entry.kind {
        crate::scan::EntryKind::Regular => {}
        crate::scan::EntryKind::Symlink(to) => {
            return refused(format!(
                "{file} is a symbolic link to {to:?}; links are refused, not followed"
            ))
        }
        crate::scan::EntryKind::Hardlink(to) => {
            return refused(format!(
                "{file} is a hard link to {to:?}; links are refused, not followed"
            ))
        }
        crate::scan::EntryKind::Other(k) => {
            return refused(format!("{file} is a {k} entry, not a regular file"))
        }
    }
    match spec.decide(&entry.content) {
        Decision::AlreadyPatched => Verdict::AlreadyPatched {
            reason: format!("{file} already carries patch {}", spec.id),
        },
        Decision::NotAffected { reason } => Verdict::NotAffected {
            reason: format!("{file}: {reason}"),
        },
        Decision::Refused { reason } => refused(format!("{file}: {reason}")),
        Decision::Patched { shape, bytes } => {
            for guard in &spec.guards {
                for gpath in image.find(&guard.target) {
                    if let Ok(Some(g)) = image.file(&gpath) {
                        if let Some(why) = spec.check_guard(guard, &g.content) {
                            return refused(format!("/{gpath}: {why}"));
                        }
                    }
                }
            }
            let mtime = match crate::layer::parse_rfc3339(&spec.mtime) {
                Ok(t) => crate::layer::new_mtime(t, &entry),
                Err(e) => return refused(format!("mtime: {e}")),
            };
            let mut changes = vec![Change::Write(crate::scan::FileEntry {
                content: std::sync::Arc::new(bytes),
                mtime,
                ..entry
            })];
            changes.extend(
                image
                    .stale_bytecode(&path)
                    .into_iter()
                    .map(Change::Whiteout),
            );
            Verdict::Patched {
                changes,
                config: None,
                notes: vec![format!("{file}: shape {shape} patched")],
            }
        }
    }
}
