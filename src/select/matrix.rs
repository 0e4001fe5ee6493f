//! The runner project's `matrix.yaml` (`pack/.post_operation/<date>_<name>/matrix.yaml`): rules
//! of `backend`, `services`, optional `platforms` and `args` (`NAME=VALUE`, the build
//! arguments). Each rule gives one tag per service by the scheme of the runner project's
//! `pack/expand_matrix.sh`: `{backend}{major.minor of <BACKEND>_VERSION}[-{CANN_ARCHS}]-
//! {service}{<SERVICE>_VERSION}`, lower-cased (the variant for cann only), with no `-dev`
//! suffix (the released tags). The whole file is checked when it is read, before any registry
//! request: a rule that gives no tag is an error naming the file and the rule.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::select::error::Error;
use crate::select::platforms::Platforms;

/// The file as written; unknown fields are refused, so a misspelt `platform:` cannot widen a
/// rule to every platform unnoticed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rules: Option<Vec<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    backend: Option<String>,
    services: Option<Vec<String>>,
    platforms: Option<Vec<String>>,
    args: Option<Vec<String>>,
}

/// One rule, checked: its backend, its platforms (none: every platform) and the tag it gives
/// for each of its services, in their order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub backend: String,
    pub services: Vec<String>,
    pub platforms: Vec<String>,
    pub tags: Vec<String>,
}

/// A matrix file, read and checked.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub path: PathBuf,
    pub rules: Vec<Rule>,
}

/// One tag a matrix gives: its backend, the platforms its rules limit it to (`None`: every
/// platform, which is also what a tag gets when any rule naming it gives no `platforms`) and
/// the rules naming it (indexes into [`Matrix::rules`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixTag {
    pub tag: String,
    pub backend: String,
    pub platforms: Option<Platforms>,
    pub rules: Vec<usize>,
}

impl Matrix {
    /// Reads and checks a matrix file.
    pub fn read(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Matrix(format!("cannot read matrix {}: {e}", path.display())))?;
        Self::parse(&text, path)
    }

    /// Checks a matrix's text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, Error> {
        let file: File = serde_yaml_ng::from_str(text).map_err(|e| {
            Error::Matrix(format!(
                "matrix {} is not a runner matrix.yaml: {e}",
                path.display()
            ))
        })?;
        let raw = file.rules.unwrap_or_default();
        if raw.is_empty() {
            return Err(Error::Matrix(format!(
                "matrix {} has no rules",
                path.display()
            )));
        }
        let mut rules = Vec::new();
        for (i, r) in raw.iter().enumerate() {
            rules.push(rule(r).map_err(|why| {
                Error::Matrix(format!(
                    "matrix {}: rules[{i}]{}: {why}",
                    path.display(),
                    describe(r)
                ))
            })?);
        }
        Ok(Matrix {
            path: path.to_owned(),
            rules,
        })
    }

    /// The backends its rules are for, sorted.
    pub fn backends(&self) -> Vec<String> {
        let mut b: Vec<String> = self.rules.iter().map(|r| r.backend.clone()).collect();
        b.sort();
        b.dedup();
        b
    }

    /// Every tag the rules give (of `backend` only, when given), each once, in the order the
    /// file first names it.
    pub fn tags(&self, backend: Option<&str>) -> Vec<MatrixTag> {
        let mut out: Vec<MatrixTag> = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            if backend.is_some_and(|b| b != r.backend) {
                continue;
            }
            let limit = (!r.platforms.is_empty()).then(|| Platforms::new(r.platforms.clone()));
            for tag in &r.tags {
                match out.iter_mut().find(|t| t.tag == *tag) {
                    Some(t) => {
                        t.rules.push(i);
                        t.platforms = match (&t.platforms, &limit) {
                            (Some(a), Some(b)) => Some(a.union(b)),
                            _ => None,
                        };
                    }
                    None => out.push(MatrixTag {
                        tag: tag.clone(),
                        backend: r.backend.clone(),
                        platforms: limit.clone(),
                        rules: vec![i],
                    }),
                }
            }
        }
        out
    }
}

/// What names a rule in an error beside its index: its backend and services, as far as given.
fn describe(r: &RawRule) -> String {
    let mut parts = Vec::new();
    if let Some(b) = &r.backend {
        parts.push(format!("backend {b}"));
    }
    if let Some(s) = r.services.as_ref().filter(|s| !s.is_empty()) {
        parts.push(format!("services {}", s.join(", ")));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// A rule checked and its tags made; the error says what is wrong with it.
fn rule(r: &RawRule) -> Result<Rule, String> {
    let backend = r
        .backend
        .clone()
        .filter(|b| !b.is_empty())
        .ok_or("has no backend")?;
    if !backend.chars().all(|c| c.is_ascii_lowercase()) {
        return Err(format!(
            "backend {backend:?} is not a runner backend (lowercase letters: cuda, rocm, cann, ...)"
        ));
    }
    let services = r.services.clone().unwrap_or_default();
    if services.is_empty() {
        return Err("has no services".into());
    }
    for s in &services {
        let name_ok = s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !name_ok {
            return Err(format!(
                "service {s:?} is not a runner service (lowercase letters and digits: vllm, sglang, mindie, ...)"
            ));
        }
    }
    let platforms = r.platforms.clone().unwrap_or_default();
    for p in &platforms {
        let parts: Vec<&str> = p.split('/').collect();
        if !(2..=3).contains(&parts.len()) || parts.iter().any(|x| x.is_empty()) {
            return Err(format!(
                "platform {p:?} is not os/arch[/variant] (e.g. linux/amd64)"
            ));
        }
    }
    let args = Args::parse(r.args.as_deref().unwrap_or_default())?;
    let prefix = tag_prefix(&backend, &args)?;
    let mut tags = Vec::new();
    for s in &services {
        let name = format!("{}_VERSION", s.to_ascii_uppercase());
        let version = args.need(&name, &format!("its {s} tag"))?;
        let tag = format!("{prefix}{s}{version}").to_ascii_lowercase();
        crate::tags::check(&tag).map_err(|e| format!("its {s} tag: {e}"))?;
        tags.push(tag);
    }
    Ok(Rule {
        backend,
        services,
        platforms,
        tags,
    })
}

/// `{backend}{major.minor}-` and, for cann, `{CANN_ARCHS}-`: what every tag of a rule starts
/// with (`cann8.3-910b-`), as `expand_matrix.sh` cuts the backend version at its minor.
fn tag_prefix(backend: &str, args: &Args) -> Result<String, String> {
    let name = format!("{}_VERSION", backend.to_ascii_uppercase());
    let version = args.need(&name, "its tags")?;
    let mut parts = version.split('.');
    let (major, minor) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if major.is_empty() || minor.is_empty() {
        return Err(format!(
            "{name}={version} has no major.minor version, which its tags name ({backend}12.9-...)"
        ));
    }
    let mut prefix = format!("{backend}{major}.{minor}-");
    if backend == "cann" {
        let archs = args.need("CANN_ARCHS", "cann tags (cann8.3-910b-...)")?;
        prefix.push_str(archs);
        prefix.push('-');
    }
    Ok(prefix)
}

/// A rule's `args`, each `NAME=VALUE`; a name given twice takes its last value, as the
/// runner's script, which exports them in order, does.
struct Args(Vec<(String, String)>);

impl Args {
    fn parse(list: &[String]) -> Result<Self, String> {
        let mut out = Vec::new();
        for a in list {
            let pair = a.split_once('=').filter(|(n, _)| {
                n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
            let Some((n, v)) = pair else {
                return Err(format!("arg {a:?} is not NAME=VALUE"));
            };
            out.push((n.to_owned(), v.to_owned()));
        }
        Ok(Args(out))
    }

    /// The value of `name`, which `what` needs; empty counts as missing.
    fn need(&self, name: &str, what: &str) -> Result<&str, String> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("no {name} in its args (needed by {what})"))
    }
}
