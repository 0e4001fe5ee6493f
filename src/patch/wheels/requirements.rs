//! A `wheels` patch's `requirements`: the lines a maintainer writes for `uv pip install`
//! (PEP 508 names, extras, specifiers, markers, `NAME @ URL` to a wheel), listed in patch.toml
//! or in a requirements file of the folder (one a line, `#` comments, `\` continuations).
//! Checked when the patch loads, so a line uv would read as something else (an option line, a
//! local path, a URL that is no wheel) stops the run naming its file and line before any
//! registry or index is asked. `${NAME}` and the POSIX trims `${NAME%%.*}`, `${NAME%.*}`,
//! `${NAME#*.}`, `${NAME##*.}` are filled in per platform from the image config's `Env`
//! ([`Requirements::for_platform`]): the variables the runner project's Dockerfiles use.

use std::str::FromStr;

use pep508_rs::{Requirement, VerbatimUrl, VersionOrUrl};

/// One requirement line as written, and where (`requirements.txt:4`, `patch.toml:7`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub text: String,
    pub origin: String,
}

/// The checked requirement lines of one patch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements {
    /// The requirements file's name in the folder, when the lines came from one.
    pub file: Option<String>,
    pub lines: Vec<Line>,
}

/// How a `${...}` reference trims its variable's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trim {
    /// `%` (shortest) or `%%` (longest) suffix.
    Suffix { longest: bool },
    /// `#` (shortest) or `##` (longest) prefix.
    Prefix { longest: bool },
}

/// One `${NAME[op PATTERN]}` reference, parsed.
struct Reference<'a> {
    name: &'a str,
    trim: Option<(Trim, &'a str)>,
}

fn parse_reference(body: &str) -> Result<Reference<'_>, String> {
    let end = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(body.len());
    let (name, rest) = body.split_at(end);
    let valid_name = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !valid_name {
        return Err(format!("${{{body}}} names no variable"));
    }
    let trim = if rest.is_empty() {
        None
    } else if let Some(p) = rest.strip_prefix("%%") {
        Some((Trim::Suffix { longest: true }, p))
    } else if let Some(p) = rest.strip_prefix('%') {
        Some((Trim::Suffix { longest: false }, p))
    } else if let Some(p) = rest.strip_prefix("##") {
        Some((Trim::Prefix { longest: true }, p))
    } else if let Some(p) = rest.strip_prefix('#') {
        Some((Trim::Prefix { longest: false }, p))
    } else {
        return Err(format!(
            "${{{body}}} is not one of ${{NAME}}, ${{NAME%PATTERN}}, ${{NAME%%PATTERN}}, ${{NAME#PATTERN}}, ${{NAME##PATTERN}}"
        ));
    };
    if let Some((t, p)) = trim {
        let literal = |s: &str| !s.is_empty() && !s.contains(['*', '?', '[', ']', '\\', '$']);
        let ok = match t {
            Trim::Suffix { .. } => literal(p.strip_suffix('*').unwrap_or(p)),
            Trim::Prefix { .. } => literal(p.strip_prefix('*').unwrap_or(p)),
        };
        if !ok {
            return Err(format!(
                "${{{body}}}: a pattern is a text, with `*` only at its end (after % or %%) or its start (after # or ##)"
            ));
        }
    }
    Ok(Reference { name, trim })
}

/// `value` trimmed as the shell trims it (`LIT*` and `*LIT` patterns, or a plain `LIT`); a
/// pattern that matches nothing leaves it whole.
fn apply_trim(value: &str, trim: Trim, pattern: &str) -> String {
    match trim {
        Trim::Suffix { longest } => match pattern.strip_suffix('*') {
            // `LIT*`: from an occurrence of LIT to the end; longest = the first occurrence.
            Some(lit) => {
                let at = if longest {
                    value.find(lit)
                } else {
                    value.rfind(lit)
                };
                at.map_or(value, |i| &value[..i]).to_owned()
            }
            None => value.strip_suffix(pattern).unwrap_or(value).to_owned(),
        },
        Trim::Prefix { longest } => match pattern.strip_prefix('*') {
            // `*LIT`: from the start through an occurrence of LIT; longest = the last one.
            Some(lit) => {
                let at = if longest {
                    value.rfind(lit)
                } else {
                    value.find(lit)
                };
                at.map_or(value, |i| &value[i + lit.len()..]).to_owned()
            }
            None => value.strip_prefix(pattern).unwrap_or(value).to_owned(),
        },
    }
}

/// Why a line could not be filled in for a platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpandError {
    /// `${...}` written wrong (found at load).
    Syntax(String),
    /// The variable is not in the platform's `Env`.
    Unset(String),
}

/// `text` with every `${...}` replaced through `lookup` (a `$` not followed by `{` stays).
pub fn expand(
    text: &str,
    lookup: &mut dyn FnMut(&str) -> Option<String>,
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(close) = after.find('}') else {
            return Err(ExpandError::Syntax(format!(
                "`${{` without its `}}` in {text:?}"
            )));
        };
        let r = parse_reference(&after[..close]).map_err(ExpandError::Syntax)?;
        let value = lookup(r.name).ok_or_else(|| ExpandError::Unset(r.name.to_owned()))?;
        match r.trim {
            Some((t, p)) => out.push_str(&apply_trim(&value, t, p)),
            None => out.push_str(&value),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The image config's `Env` as `NAME` -> value (the last definition of a name wins, as the
/// runtime's does).
pub fn config_env(config: Option<&serde_json::Value>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let entries = config
        .and_then(|c| c.get("config"))
        .and_then(|c| c.get("Env"))
        .and_then(|e| e.as_array());
    for e in entries.into_iter().flatten().filter_map(|e| e.as_str()) {
        if let Some((k, v)) = e.split_once('=') {
            out.retain(|(n, _)| n != k);
            out.push((k.to_owned(), v.to_owned()));
        }
    }
    out
}

/// Why `text` (one line, expanded) is not a requirement this route takes; `None` when it is.
fn refusal(text: &str) -> Option<String> {
    let first = text.split_whitespace().next().unwrap_or("");
    if first.starts_with('-') {
        return Some(format!(
            "{first} is an option line; a wheels patch takes requirement lines only (its index options are patch.toml's index-url, extra-index-url, find-links and no-index)"
        ));
    }
    let looks_local = first.starts_with(['.', '/', '~'])
        || (!text.contains("://")
            && [".whl", ".tar.gz", ".zip"]
                .iter()
                .any(|e| first.ends_with(e)));
    let parsed = match Requirement::<VerbatimUrl>::from_str(text) {
        Ok(r) => r,
        Err(_) if looks_local => {
            return Some(format!(
                "{first} is a local path; only requirements resolved from an index, or NAME @ an http(s) URL of a wheel, are taken"
            ))
        }
        Err(_) if text.contains("://") && !text.contains('@') => {
            return Some(format!(
                "{first} is a URL without a name; write NAME @ {first}"
            ))
        }
        Err(e) => {
            let first_line = e.to_string();
            let first_line = first_line.lines().next().unwrap_or("");
            return Some(format!("not a PEP 508 requirement: {first_line}"));
        }
    };
    if let Some(VersionOrUrl::Url(url)) = &parsed.version_or_url {
        let given = url.given().map(str::to_owned).unwrap_or(url.to_string());
        let scheme = url.scheme();
        if scheme == "file" {
            return Some(format!(
                "{given} is a local path; only requirements resolved from an index, or NAME @ an http(s) URL of a wheel, are taken"
            ));
        }
        if scheme != "http" && scheme != "https" {
            return Some(format!(
                "{given}: only http(s) URLs of wheels are taken, not {scheme}:"
            ));
        }
        if !url.path().ends_with(".whl") {
            return Some(format!(
                "{given} is not a wheel's URL; the route installs wheels only"
            ));
        }
    }
    None
}

/// Checks one line as written: its `${...}` references, then the line with each filled by a
/// placeholder (the real values come per platform).
fn check(text: &str) -> Result<(), String> {
    let placeholder = expand(text, &mut |_| Some("0".to_owned())).map_err(|e| match e {
        ExpandError::Syntax(m) | ExpandError::Unset(m) => m,
    })?;
    match refusal(&placeholder) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// The lines of a requirements file, as pip and uv read one: `\` at a line's end joins the
/// next, `#` at the start or after a space begins a comment, blank lines are skipped. Each line
/// is checked; an error names `origin:line`.
pub fn parse_file(text: &str, origin: &str) -> Result<Vec<Line>, String> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        if let Some(head) = raw.strip_suffix('\\') {
            joined.push_str(head);
            pending = Some((start, joined));
            continue;
        }
        joined.push_str(raw);
        let text = strip_comment(&joined).trim();
        if text.is_empty() {
            continue;
        }
        check(text).map_err(|why| format!("{origin}:{start}: {why}"))?;
        out.push(Line {
            text: text.to_owned(),
            origin: format!("{origin}:{start}"),
        });
    }
    if let Some((start, _)) = pending {
        return Err(format!(
            "{origin}:{start}: the file ends inside a `\\` continuation"
        ));
    }
    if out.is_empty() {
        return Err(format!("{origin}: holds no requirement"));
    }
    Ok(out)
}

fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            return &line[..i];
        }
    }
    line
}

/// One line of a patch.toml `requirements = [...]` list, checked; `origin` names the file and
/// line.
pub fn parse_item(text: &str, origin: &str) -> Result<Line, String> {
    let t = text.trim();
    if t.is_empty() || t.contains('\n') {
        return Err(format!("{origin}: {text:?} is not one requirement line"));
    }
    check(t).map_err(|why| format!("{origin}: {why}"))?;
    Ok(Line {
        text: t.to_owned(),
        origin: origin.to_owned(),
    })
}

impl Requirements {
    /// The lines for one platform: every `${...}` filled from the config's `Env`; an unset
    /// variable refuses the platform naming it, and a line the values make unreadable names
    /// its origin.
    pub fn for_platform(&self, config: Option<&serde_json::Value>) -> Result<Vec<String>, String> {
        let env = config_env(config);
        let mut lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let mut out = Vec::with_capacity(self.lines.len());
        for line in &self.lines {
            let text = expand(&line.text, &mut lookup).map_err(|e| match e {
                ExpandError::Unset(name) => format!(
                    "{}: ${{{name}}} is not set in the image config's Env",
                    line.origin
                ),
                ExpandError::Syntax(m) => format!("{}: {m}", line.origin),
            })?;
            if let Some(why) = refusal(&text) {
                return Err(format!(
                    "{}: {text:?} with the image's Env: {why}",
                    line.origin
                ));
            }
            out.push(text);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
