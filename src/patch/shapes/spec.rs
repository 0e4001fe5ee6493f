//! The `shapes` spec as `patch.toml` holds it, and the pure decision on one file's bytes.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::text::{indent_of, Template, TextFile};
use crate::patch::error::{Error, ErrorKind};
use crate::patch::outcome::Outcome;
use crate::version::VersionRange;

/// One patch, as written in its `patch.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchSpec {
    pub id: String,
    /// `"shapes"` when given (the default kind).
    #[serde(default)]
    pub kind: Option<String>,
    pub title: String,
    /// Services named in the tag this patch is for; empty: all.
    #[serde(default)]
    pub services: Vec<String>,
    /// Backends this patch is for; empty: all.
    #[serde(default)]
    pub backends: Vec<String>,
    /// Path suffix, matched on whole components, of the file the container imports.
    pub target: String,
    /// Distribution whose version is reported (dist-info `METADATA` or `_version.py`).
    pub package: String,
    pub affected: VersionRange,
    /// RFC 3339 modification time given to the patched file.
    pub mtime: String,
    /// First line of every replacement: its presence means "already patched by us".
    pub marker: String,
    #[serde(default)]
    pub unaffected_without: Vec<String>,
    #[serde(default)]
    pub fixed: Vec<Block>,
    #[serde(default, rename = "shape")]
    pub shapes: Vec<Shape>,
    #[serde(default, rename = "guard")]
    pub guards: Vec<Guard>,
    /// More files changed by the same patch (`[[file]]` tables), each with its own target,
    /// marker and shapes; decided together with the top-level one.
    #[serde(default, rename = "file")]
    pub files: Vec<FileSpec>,
}

/// A block of lines whose `${name}` placeholders take one of the listed alternatives.
#[derive(Debug, Clone, Deserialize)]
pub struct Block {
    pub name: String,
    pub lines: String,
    #[serde(flatten)]
    pub vars: BTreeMap<String, Vec<String>>,
}

/// A recognised buggy shape and its replacement.
#[derive(Debug, Clone, Deserialize)]
pub struct Shape {
    pub name: String,
    pub find: String,
    pub replace: String,
    #[serde(flatten)]
    pub vars: BTreeMap<String, Vec<String>>,
}

/// One more file of a `shapes` patch: the per-file fields of the top level.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    pub target: String,
    pub marker: String,
    #[serde(default)]
    pub unaffected_without: Vec<String>,
    #[serde(default)]
    pub fixed: Vec<Block>,
    #[serde(rename = "shape")]
    pub shapes: Vec<Shape>,
}

/// A second file whose content can make the patch insufficient (Ascend's subclass).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Guard {
    pub target: String,
    pub class: String,
    #[serde(default)]
    pub refuse_if_defines: Vec<String>,
    #[serde(default)]
    pub refuse_if_contains: Vec<String>,
    pub message: String,
}

/// What the shapes engine decided for one file's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDecision {
    pub outcome: Outcome,
    /// Why, for every outcome but `patched` and `already-patched`.
    pub reason: String,
    /// The shape that matched and the patched bytes, when patched.
    pub patched: Option<(String, Vec<u8>)>,
}

impl FileDecision {
    /// Why, for every outcome: the shape patched, the patch already carried (`id`), or the
    /// reason given.
    pub fn why(&self, id: &str) -> String {
        match (&self.patched, self.outcome) {
            (Some((shape, _)), _) => format!("shape {shape} patched"),
            (None, Outcome::AlreadyPatched) => format!("already carries patch {id}"),
            (None, _) => self.reason.clone(),
        }
    }

    fn patched(shape: String, bytes: Vec<u8>) -> Self {
        FileDecision {
            outcome: Outcome::Patched,
            reason: String::new(),
            patched: Some((shape, bytes)),
        }
    }

    fn already() -> Self {
        FileDecision {
            outcome: Outcome::AlreadyPatched,
            reason: String::new(),
            patched: None,
        }
    }

    fn not_affected(reason: String) -> Self {
        FileDecision {
            outcome: Outcome::NotAffected,
            reason,
            patched: None,
        }
    }

    fn refused(reason: String) -> Self {
        FileDecision {
            outcome: Outcome::Refused,
            reason,
            patched: None,
        }
    }
}

impl PatchSpec {
    /// Parses and validates a spec, so that a broken patch folder fails at load, not mid-run.
    pub fn parse(text: &str, origin: &str) -> Result<Self, Error> {
        let spec: PatchSpec =
            toml::from_str(text).map_err(|e| crate::patch::meta::toml_error(origin, text, &e))?;
        let invalid = |m: String| Error::new(ErrorKind::Invalid, m);
        if spec.shapes.is_empty() {
            return Err(invalid(format!("patch spec {origin} has no [[shape]]")));
        }
        if !spec.target.ends_with(".py") && !spec.target.contains('/') {
            return Err(invalid(format!(
                "patch spec {origin}: target must be a path suffix"
            )));
        }
        crate::patch::meta::parse_rfc3339(&spec.mtime)
            .map_err(|e| invalid(format!("patch spec {origin}: mtime: {e}")))?;
        let per_file = spec.per_file();
        for (i, one) in per_file.iter().enumerate() {
            if one.shapes.is_empty() {
                return Err(invalid(format!(
                    "patch spec {origin}: [[file]] {} has no [[file.shape]]",
                    one.target
                )));
            }
            if per_file[..i].iter().any(|o| o.target == one.target) {
                return Err(invalid(format!(
                    "patch spec {origin}: target {} is named twice",
                    one.target
                )));
            }
            for shape in &one.shapes {
                if !shape.replace.contains(&one.marker) && !shape.replace.contains("${marker}") {
                    return Err(invalid(format!(
                        "patch spec {origin}: shape {} does not write the marker",
                        shape.name
                    )));
                }
            }
        }
        Ok(spec)
    }

    /// One spec per file the patch changes: the top-level one (with the guards), then each
    /// `[[file]]` (sharing the patch's id, title and mtime).
    pub fn per_file(&self) -> Vec<PatchSpec> {
        let mut out = vec![PatchSpec {
            files: Vec::new(),
            ..self.clone()
        }];
        for f in &self.files {
            out.push(PatchSpec {
                target: f.target.clone(),
                marker: f.marker.clone(),
                unaffected_without: f.unaffected_without.clone(),
                fixed: f.fixed.clone(),
                shapes: f.shapes.clone(),
                guards: Vec::new(),
                files: Vec::new(),
                ..self.clone()
            });
        }
        out
    }

    /// The file name part of the target (`multi_connector.py`).
    pub fn target_file_name(&self) -> &str {
        self.target.rsplit('/').next().unwrap_or(&self.target)
    }

    /// Decides what to do with one file.
    pub fn decide(&self, bytes: &[u8]) -> FileDecision {
        let text = match TextFile::parse(bytes) {
            Ok(t) => t,
            Err(reason) => return FileDecision::refused(reason),
        };
        // Already ours: the marker and an intact replacement block.
        if text.lines.iter().any(|l| l.contains(&self.marker)) {
            for shape in &self.shapes {
                let tmpl = Template::new(&shape.replace, &shape.vars, &self.marker);
                if !tmpl.find_all(&text.lines).is_empty() {
                    return FileDecision::already();
                }
            }
            return FileDecision::refused(format!(
                "file carries the marker of patch {} but its patched block was altered",
                self.id
            ));
        }
        let mut hits = Vec::new();
        for shape in &self.shapes {
            let tmpl = Template::new(&shape.find, &shape.vars, &self.marker);
            for m in tmpl.find_all(&text.lines) {
                hits.push((shape, m));
            }
        }
        match hits.len() {
            1 => {
                let (shape, m) = &hits[0];
                let replace = Template::new(&shape.replace, &shape.vars, &self.marker);
                let new_lines = replace.render(&m.indent, &m.bindings);
                let mut lines: Vec<String> = text.lines[..m.start].to_vec();
                lines.extend(new_lines);
                lines.extend_from_slice(&text.lines[m.start + m.len..]);
                FileDecision::patched(shape.name.clone(), text.render(&lines))
            }
            0 => self.no_shape(&text),
            n => FileDecision::refused(format!(
                "ambiguous: {n} blocks match (lines {}); refusing to guess which to patch",
                hits.iter()
                    .map(|(_, m)| (m.start + 1).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// No buggy shape in the file: the upstream fix, a file older than the bug, or a refusal.
    fn no_shape(&self, text: &TextFile) -> FileDecision {
        for fixed in &self.fixed {
            let tmpl = Template::new(&fixed.lines, &fixed.vars, &self.marker);
            if !tmpl.find_all(&text.lines).is_empty() {
                return FileDecision::not_affected(format!(
                    "file already has the upstream fix ({})",
                    fixed.name
                ));
            }
        }
        if !self.unaffected_without.is_empty()
            && !self
                .unaffected_without
                .iter()
                .any(|s| text.lines.iter().any(|l| l.contains(s.as_str())))
        {
            return FileDecision::not_affected(format!(
                "file has no {} (predates the affected code)",
                self.unaffected_without.join(", ")
            ));
        }
        FileDecision::refused(format!(
            "unrecognised shape: expected exactly one block of shape {} or the upstream fix",
            self.shapes
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(" or ")
        ))
    }

    /// Checks a guard file; `Some(reason)` when the patch must be refused.
    pub fn check_guard(&self, guard: &Guard, bytes: &[u8]) -> Option<String> {
        let text = String::from_utf8_lossy(bytes);
        let lines: Vec<&str> = text.lines().collect();
        let class_at = lines.iter().position(|l| {
            let t = l.trim_start();
            t.starts_with(&format!("class {}(", guard.class))
                || t.starts_with(&format!("class {}:", guard.class))
        })?;
        let class_indent = indent_of(lines[class_at]).len();
        let body = lines[class_at + 1..]
            .iter()
            .take_while(|l| l.trim().is_empty() || indent_of(l).len() > class_indent);
        for line in body {
            let t = line.trim_start();
            for name in &guard.refuse_if_defines {
                if t.starts_with(&format!("def {name}("))
                    || t.starts_with(&format!("async def {name}("))
                {
                    return Some(format!("{} (it defines {name})", guard.message));
                }
            }
            for needle in &guard.refuse_if_contains {
                if line.contains(needle.as_str()) {
                    return Some(format!("{} (it contains \"{needle}\")", guard.message));
                }
            }
        }
        None
    }
}
