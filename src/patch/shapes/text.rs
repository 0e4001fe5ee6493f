//! Text files as the shape engine reads and writes them (BOM, line endings, final newline
//! kept), and templates: blocks of lines with relative indentation and `${var}` placeholders.

use std::collections::BTreeMap;

/// A text file split into lines, remembering what must be written back as it was:
/// a UTF-8 BOM, CRLF line endings, and whether it ends with a newline.
pub(super) struct TextFile {
    pub(super) bom: bool,
    pub(super) crlf: bool,
    pub(super) trailing_newline: bool,
    pub(super) lines: Vec<String>,
}

impl TextFile {
    pub(super) fn parse(bytes: &[u8]) -> Result<Self, String> {
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

    pub(super) fn render(&self, lines: &[String]) -> Vec<u8> {
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
pub(super) struct Template<'a> {
    lines: Vec<String>,
    vars: &'a BTreeMap<String, Vec<String>>,
}

/// Where a template matched: first line, line count, the block's indentation and the values
/// its placeholders took.
pub(super) struct Match {
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) indent: String,
    pub(super) bindings: BTreeMap<String, String>,
}

impl<'a> Template<'a> {
    pub(super) fn new(text: &str, vars: &'a BTreeMap<String, Vec<String>>, marker: &str) -> Self {
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
    pub(super) fn find_all(&self, file: &[String]) -> Vec<Match> {
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
    pub(super) fn match_line(
        &self,
        tmpl: &str,
        line: &str,
        bindings: &mut BTreeMap<String, String>,
    ) -> bool {
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

    pub(super) fn render(&self, indent: &str, bindings: &BTreeMap<String, String>) -> Vec<String> {
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

/// The leading whitespace of a line.
pub(super) fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}
