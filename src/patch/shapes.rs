//! The `shapes` kind: block find/replace with `${args}` alternatives (the built-in fix). The spec
//! format read from `patches/<id>/patch.toml`, the pure function that decides, from a file's
//! bytes alone, whether it is patched, already patched, not affected, or refused, and its
//! implementation of the patch interface. No I/O here, so every shape decision is table-testable.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

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
    /// sha256 of the `patch.toml` text this spec was read from, named in provenance statements.
    #[serde(skip)]
    pub definition_digest: String,
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

/// What the patch engine decided for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Patched { shape: String, bytes: Vec<u8> },
    AlreadyPatched,
    NotAffected { reason: String },
    Refused { reason: String },
}

impl Decision {
    pub fn outcome(&self) -> Outcome {
        match self {
            Decision::Patched { .. } => Outcome::Patched,
            Decision::AlreadyPatched => Outcome::AlreadyPatched,
            Decision::NotAffected { .. } => Outcome::NotAffected,
            Decision::Refused { .. } => Outcome::Refused,
        }
    }
}

/// The four outcomes of the digest map, ordered from "nothing to do" to "stop".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    NotAffected,
    AlreadyPatched,
    Patched,
    Refused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::NotAffected => "not-affected",
            Outcome::AlreadyPatched => "already-patched",
            Outcome::Patched => "patched",
            Outcome::Refused => "refused",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PatchSpec {
    /// Parses and validates a spec, so that a broken patch folder fails at load, not mid-run.
    pub fn parse(text: &str, origin: &str) -> Result<Self, String> {
        let mut spec: PatchSpec =
            toml::from_str(text).map_err(|e| super::toml_error(origin, text, &e))?;
        spec.definition_digest = crate::digest::sha256(text.as_bytes());
        if spec.shapes.is_empty() {
            return Err(format!("patch spec {origin} has no [[shape]]"));
        }
        if !spec.target.ends_with(".py") && !spec.target.contains('/') {
            return Err(format!("patch spec {origin}: target must be a path suffix"));
        }
        crate::layer::parse_rfc3339(&spec.mtime)
            .map_err(|e| format!("patch spec {origin}: mtime: {e}"))?;
        let per_file = spec.per_file();
        for (i, one) in per_file.iter().enumerate() {
            if one.shapes.is_empty() {
                return Err(format!(
                    "patch spec {origin}: [[file]] {} has no [[file.shape]]",
                    one.target
                ));
            }
            if per_file[..i].iter().any(|o| o.target == one.target) {
                return Err(format!(
                    "patch spec {origin}: target {} is named twice",
                    one.target
                ));
            }
            for shape in &one.shapes {
                if !shape.replace.contains(&one.marker) && !shape.replace.contains("${marker}") {
                    return Err(format!(
                        "patch spec {origin}: shape {} does not write the marker",
                        shape.name
                    ));
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
    pub fn decide(&self, bytes: &[u8]) -> Decision {
        let text = match TextFile::parse(bytes) {
            Ok(t) => t,
            Err(reason) => return Decision::Refused { reason },
        };
        // Already ours: the marker and an intact replacement block.
        if text.lines.iter().any(|l| l.contains(&self.marker)) {
            for shape in &self.shapes {
                let tmpl = Template::new(&shape.replace, &shape.vars, &self.marker);
                if !tmpl.find_all(&text.lines).is_empty() {
                    return Decision::AlreadyPatched;
                }
            }
            return Decision::Refused {
                reason: format!(
                    "file carries the marker of patch {} but its patched block was altered",
                    self.id
                ),
            };
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
                Decision::Patched {
                    shape: shape.name.clone(),
                    bytes: text.render(&lines),
                }
            }
            0 => {
                for fixed in &self.fixed {
                    let tmpl = Template::new(&fixed.lines, &fixed.vars, &self.marker);
                    if !tmpl.find_all(&text.lines).is_empty() {
                        return Decision::NotAffected {
                            reason: format!("file already has the upstream fix ({})", fixed.name),
                        };
                    }
                }
                if !self.unaffected_without.is_empty()
                    && !self
                        .unaffected_without
                        .iter()
                        .any(|s| text.lines.iter().any(|l| l.contains(s.as_str())))
                {
                    return Decision::NotAffected {
                        reason: format!(
                            "file has no {} (predates the affected code)",
                            self.unaffected_without.join(", ")
                        ),
                    };
                }
                Decision::Refused {
                    reason: format!(
                        "unrecognised shape: expected exactly one block of shape {} or the upstream fix",
                        self.shapes
                            .iter()
                            .map(|s| s.name.as_str())
                            .collect::<Vec<_>>()
                            .join(" or ")
                    ),
                }
            }
            n => Decision::Refused {
                reason: format!(
                    "ambiguous: {n} blocks match (lines {}); refusing to guess which to patch",
                    hits.iter()
                        .map(|(_, m)| (m.start + 1).to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        }
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

fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// A text file split into lines, remembering what must be written back as it was:
/// a UTF-8 BOM, CRLF line endings, and whether it ends with a newline.
struct TextFile {
    bom: bool,
    crlf: bool,
    trailing_newline: bool,
    lines: Vec<String>,
}

impl TextFile {
    fn parse(bytes: &[u8]) -> Result<Self, String> {
        let (bom, body) = match bytes.strip_prefix(b"\xEF\xBB\xBF") {
            Some(rest) => (true, rest),
            None => (false, bytes),
        };
        let text =
            std::str::from_utf8(body).map_err(|e| format!("file is not UTF-8 text ({e})"))?;
        let newlines = text.matches('\n').count();
        let crlfs = text.matches("\r\n").count();
        let crs = text.matches('\r').count();
        let crlf = crlfs > 0;
        if crs != crlfs || (crlf && crlfs != newlines) {
            return Err("file mixes line endings (LF, CRLF or CR); refusing to guess".into());
        }
        let trailing_newline = text.ends_with('\n');
        let sep = if crlf { "\r\n" } else { "\n" };
        let mut lines: Vec<String> = text.split(sep).map(str::to_owned).collect();
        if trailing_newline {
            lines.pop();
        }
        Ok(TextFile {
            bom,
            crlf,
            trailing_newline,
            lines,
        })
    }

    fn render(&self, lines: &[String]) -> Vec<u8> {
        let sep = if self.crlf { "\r\n" } else { "\n" };
        let mut out = String::new();
        if self.bom {
            out.push('\u{FEFF}');
        }
        out.push_str(&lines.join(sep));
        if self.trailing_newline {
            out.push_str(sep);
        }
        out.into_bytes()
    }
}

/// A block of template lines with relative indentation and `${var}` placeholders.
struct Template<'a> {
    lines: Vec<String>,
    vars: &'a BTreeMap<String, Vec<String>>,
}

/// Where a template matched: first line, line count, the block's indentation and the values
/// its placeholders took.
struct Match {
    start: usize,
    len: usize,
    indent: String,
    bindings: BTreeMap<String, String>,
}

impl<'a> Template<'a> {
    fn new(text: &str, vars: &'a BTreeMap<String, Vec<String>>, marker: &str) -> Self {
        let text = text.replace("${marker}", marker);
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        while lines.first().is_some_and(|l| l.trim().is_empty()) {
            lines.remove(0);
        }
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        Template { lines, vars }
    }

    /// Every position where all lines match: the first line fixes the indentation, and each
    /// later line must equal that indentation plus its own template line exactly.
    fn find_all(&self, file: &[String]) -> Vec<Match> {
        let mut found = Vec::new();
        if self.lines.is_empty() || file.len() < self.lines.len() {
            return found;
        }
        for start in 0..=file.len() - self.lines.len() {
            let indent = indent_of(&file[start]).to_owned();
            let mut bindings = BTreeMap::new();
            let ok = self.lines.iter().enumerate().all(|(i, tl)| {
                let line = &file[start + i];
                if tl.trim().is_empty() {
                    return line.trim().is_empty();
                }
                match line.strip_prefix(indent.as_str()) {
                    Some(rest) => self.match_line(tl, rest, &mut bindings),
                    None => false,
                }
            });
            if ok {
                found.push(Match {
                    start,
                    len: self.lines.len(),
                    indent,
                    bindings,
                });
            }
        }
        found
    }

    /// Matches one line with placeholders; a placeholder bound earlier must take the same value.
    fn match_line(&self, tmpl: &str, line: &str, bindings: &mut BTreeMap<String, String>) -> bool {
        let Some(open) = tmpl.find("${") else {
            return tmpl == line;
        };
        let Some(close_rel) = tmpl[open..].find('}') else {
            return tmpl == line;
        };
        let name = &tmpl[open + 2..open + close_rel];
        let (prefix, rest_tmpl) = (&tmpl[..open], &tmpl[open + close_rel + 1..]);
        let Some(after_prefix) = line.strip_prefix(prefix) else {
            return false;
        };
        let choices: Vec<String> = match bindings.get(name) {
            Some(bound) => vec![bound.clone()],
            None => self.vars.get(name).cloned().unwrap_or_default(),
        };
        for choice in choices {
            if let Some(rest_line) = after_prefix.strip_prefix(choice.as_str()) {
                let mut trial = bindings.clone();
                trial.insert(name.to_owned(), choice.clone());
                if self.match_line(rest_tmpl, rest_line, &mut trial) {
                    *bindings = trial;
                    return true;
                }
            }
        }
        false
    }

    fn render(&self, indent: &str, bindings: &BTreeMap<String, String>) -> Vec<String> {
        self.lines
            .iter()
            .map(|l| {
                let mut line = l.clone();
                for (name, value) in bindings {
                    line = line.replace(&format!("${{{name}}}"), value);
                }
                if line.trim().is_empty() {
                    String::new()
                } else {
                    format!("{indent}{line}")
                }
            })
            .collect()
    }
}

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

    /// Each file decided on its own ([`decide_one`]), then together: a refusal of any refuses
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PatchSpec {
        crate::patches::builtin()
            .expect("builtin patches load")
            .into_iter()
            .find(|p| p.id == "multiconnector-observe")
            .expect("multiconnector-observe is built in")
    }

    const DATA: &str = "class MultiKVConnectorPromMetrics(KVConnectorPromMetrics):\n    def observe(self, transfer_stats_data, engine_idx=0):\n        for connector_id, stats_data in transfer_stats_data.items():\n            assert connector_id in self._prom_metrics, (\n                f\"{connector_id} is not contained in the list of registered connectors \"\n                f\"with Prometheus metrics support: {self._prom_metrics.keys()}\"\n            )\n            self._prom_metrics[connector_id].observe(stats_data[\"data\"], engine_idx)\n\n\nx = 1\n";

    #[test]
    fn patches_data_shape_and_keeps_argument_form() {
        let d = spec().decide(DATA.as_bytes());
        let Decision::Patched { bytes, shape } = d else {
            panic!("expected patched, got {d:?}")
        };
        assert_eq!(shape, "assert-then-index");
        let out = String::from_utf8(bytes).expect("utf8");
        assert!(out.contains("            prom_metrics = self._prom_metrics.get(connector_id)\n"));
        assert!(out
            .contains("                prom_metrics.observe(stats_data[\"data\"], engine_idx)\n"));
        assert!(!out.contains("assert connector_id"));
        assert!(out.ends_with("\n\nx = 1\n"));
        assert_eq!(spec().decide(out.as_bytes()), Decision::AlreadyPatched);
    }

    #[test]
    fn plain_shape_keeps_plain_argument() {
        let src = DATA.replace("stats_data[\"data\"], engine_idx", "stats_data, engine_idx");
        let Decision::Patched { bytes, .. } = spec().decide(src.as_bytes()) else {
            panic!("expected patched")
        };
        let out = String::from_utf8(bytes).expect("utf8");
        assert!(out.contains("prom_metrics.observe(stats_data, engine_idx)"));
        assert!(!out.contains("[\"data\"]"));
    }

    #[test]
    fn crlf_and_bom_are_kept() {
        let src = format!("\u{FEFF}{}", DATA.replace('\n', "\r\n"));
        let Decision::Patched { bytes, .. } = spec().decide(src.as_bytes()) else {
            panic!("expected patched")
        };
        assert!(bytes.starts_with(b"\xEF\xBB\xBF"));
        let out = String::from_utf8(bytes[3..].to_vec()).expect("utf8");
        assert_eq!(out.matches('\n').count(), out.matches("\r\n").count());
        assert!(out.contains("prom_metrics.get(connector_id)\r\n"));
    }

    #[test]
    fn refuses_mixed_endings_altered_message_and_duplicates() {
        let mixed = DATA.replacen('\n', "\r\n", 1);
        assert!(matches!(
            spec().decide(mixed.as_bytes()),
            Decision::Refused { .. }
        ));
        let altered = DATA.replace("with Prometheus metrics support", "with metrics");
        assert!(matches!(
            spec().decide(altered.as_bytes()),
            Decision::Refused { .. }
        ));
        let twice = format!("{DATA}{DATA}");
        let d = spec().decide(twice.as_bytes());
        assert!(
            matches!(&d, Decision::Refused { reason } if reason.contains("ambiguous")),
            "{d:?}"
        );
    }

    #[test]
    fn upstream_fix_and_old_files_are_not_affected() {
        let fixed = "class MultiKVConnectorPromMetrics:\n    def observe(self, d, engine_idx=0):\n        for connector_id, stats_data in d.items():\n            prom_metrics = self._prom_metrics.get(connector_id)\n            if prom_metrics is not None:\n                prom_metrics.observe(stats_data, engine_idx)\n";
        assert!(matches!(
            spec().decide(fixed.as_bytes()),
            Decision::NotAffected { .. }
        ));
        let old = "class MultiConnector:\n    pass\n";
        assert!(matches!(
            spec().decide(old.as_bytes()),
            Decision::NotAffected { .. }
        ));
    }

    #[test]
    fn marker_with_altered_block_is_refused() {
        let Decision::Patched { bytes, .. } = spec().decide(DATA.as_bytes()) else {
            panic!("expected patched")
        };
        let tampered = String::from_utf8(bytes)
            .expect("utf8")
            .replace("if prom_metrics is not None:", "if prom_metrics:");
        assert!(matches!(
            spec().decide(tampered.as_bytes()),
            Decision::Refused { .. }
        ));
    }

    #[test]
    fn guard_refuses_overriding_subclass_only() {
        let s = spec();
        let g = &s.guards[0];
        let plain = "class AscendMultiConnector(MultiConnector, X):\n    def __init__(self):\n        super().__init__()\n\n    def get_finished(self):\n        return None\n";
        assert_eq!(s.check_guard(g, plain.as_bytes()), None);
        let over = format!("{plain}\n    def observe(self, d, engine_idx=0):\n        pass\n");
        assert!(s.check_guard(g, over.as_bytes()).is_some());
        let later = format!("{plain}\n\ndef observe():\n    pass\n");
        assert_eq!(s.check_guard(g, later.as_bytes()), None);
    }

    fn interface() -> ShapesPatch {
        let text = crate::patches::BUILTIN
            .iter()
            .find(|(f, _)| *f == "multiconnector-observe")
            .map(|(_, t)| *t)
            .expect("built in");
        ShapesPatch::load(text, "patches/multiconnector-observe/patch.toml").expect("loads")
    }

    #[test]
    fn interface_decides_as_the_engine_and_hides_bytecode() {
        use crate::patch::testview::Mem;
        use crate::patch::{Change, PatchKind, Verdict};
        let dir = "usr/lib/python3/dist-packages/vllm/distributed/kv_transfer/kv_connector/v1";
        let img = Mem(
            [
                (
                    format!("{dir}/multi_connector.py"),
                    DATA.as_bytes().to_vec(),
                ),
                (
                    format!("{dir}/__pycache__/multi_connector.cpython-312.pyc"),
                    vec![0],
                ),
                (format!("{dir}/__pycache__/base.cpython-312.pyc"), vec![0]),
            ]
            .into_iter()
            .collect(),
            None,
        );
        let Verdict::Patched { changes, .. } = interface().decide(&img) else {
            panic!("expected patched")
        };
        let Decision::Patched { bytes, .. } = spec().decide(DATA.as_bytes()) else {
            panic!("engine patches")
        };
        assert!(matches!(&changes[0], Change::Write(e) if *e.content == bytes && e.mode == 0o640));
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert!(
            matches!(&changes[1], Change::Whiteout(p) if p.ends_with("__pycache__/multi_connector.cpython-312.pyc"))
        );

        let mut two = Mem(img.0.clone(), None);
        two.0.insert(
            "vllm-workspace/vllm/vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py"
                .into(),
            DATA.as_bytes().to_vec(),
        );
        assert!(
            matches!(interface().decide(&two), Verdict::Refused { reason } if reason.contains("2 copies"))
        );
        let mut guarded = Mem(img.0.clone(), None);
        guarded.0.insert(
            "x/vllm_ascend/distributed/kv_transfer/ascend_multi_connector.py".into(),
            b"class AscendMultiConnector(MultiConnector):\n    def observe(self, d, engine_idx=0):\n        pass\n".to_vec(),
        );
        assert!(
            matches!(interface().decide(&guarded), Verdict::Refused { reason } if reason.contains("Ascend"))
        );
        let empty = Mem(Default::default(), None);
        assert!(matches!(
            interface().decide(&empty),
            Verdict::Refused { .. }
        ));
    }

    #[test]
    fn several_files_are_decided_together() {
        use crate::patch::testview::Mem;
        use crate::patch::{PatchKind, Verdict};
        let toml = r##"
id = "two"
title = "t"
target = "pkg/a.py"
package = "pkg"
affected = ">=0"
mtime = "2026-01-01T00:00:00Z"
marker = "# two"
[[shape]]
name = "a"
find = "bug_a()"
replace = """
# two
fix_a()
"""
[[file]]
target = "pkg/b.py"
marker = "# two (b)"
[[file.shape]]
name = "b"
find = "bug_b()"
replace = """
# two (b)
fix_b()
"""
"##;
        let p = ShapesPatch::load(toml, "two/patch.toml").expect("loads");
        assert_eq!(p.targets(), ["pkg/a.py", "pkg/b.py"]);
        let view = |a: &str, b: &str| {
            Mem(
                [
                    ("r/pkg/a.py".to_owned(), a.as_bytes().to_vec()),
                    ("r/pkg/b.py".to_owned(), b.as_bytes().to_vec()),
                ]
                .into_iter()
                .collect(),
                None,
            )
        };
        match p.decide(&view("bug_a()\n", "x\nbug_b()\n")) {
            Verdict::Patched { changes, .. } => {
                let written: Vec<&str> = changes.iter().map(|c| c.path()).collect();
                assert_eq!(written, ["r/pkg/a.py", "r/pkg/b.py"]);
            }
            other => panic!("expected patched, got {other:?}"),
        }
        assert!(matches!(
            p.decide(&view("# two\nfix_a()\n", "# two (b)\nfix_b()\n")),
            Verdict::AlreadyPatched { .. }
        ));
        let half = p.decide(&view("# two\nfix_a()\n", "bug_b()\n"));
        assert!(
            matches!(&half, Verdict::Refused { reason } if reason.starts_with("partly applied")),
            "{half:?}"
        );
        assert!(ShapesPatch::load(&toml.replace("[[file.shape]]", "[[nope]]"), "t").is_err());
    }
}
