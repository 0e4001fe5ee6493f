//! The `env` kind: set or remove variables in the image config's `config.Env`, and prepend or
//! append entries to list variables (`PATH`: `list.rs`). No layer: the edit is a pure function
//! over the config as a JSON value (key order and unknown fields kept), plus a history entry
//! marked `empty_layer`, as `docker build` records an `ENV` line.

use std::collections::BTreeMap;

pub mod list;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::patch::error::{Error, ErrorKind};
use crate::patch::kind::{Description, Patch, PatchKind};
use crate::patch::meta::{self, at_line, toml_error, Meta};
use crate::patch::source::Source;
use crate::patch::tree::Tree;
use crate::patch::verdict::Verdict;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
// The shared fields are listed so that unknown ones are refused; `meta::read` reads them.
#[allow(dead_code)]
struct EnvToml {
    id: toml::Spanned<String>,
    kind: String,
    title: String,
    #[serde(default)]
    services: Vec<String>,
    #[serde(default)]
    backends: Vec<String>,
    package: Option<String>,
    affected: Option<crate::version::VersionRange>,
    mtime: Option<String>,
    env: toml::Spanned<EnvTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvTable {
    #[serde(default)]
    set: BTreeMap<String, String>,
    #[serde(default)]
    unset: Vec<String>,
    #[serde(default)]
    prepend: BTreeMap<String, String>,
    #[serde(default)]
    append: BTreeMap<String, String>,
    separator: Option<String>,
}

/// An `env` patch: variables to set (in name order) and to remove, and entries to add to list
/// variables.
#[derive(Debug, Clone)]
pub struct EnvPatch {
    pub meta: Meta,
    pub set: BTreeMap<String, String>,
    pub unset: Vec<String>,
    /// Entries added to list variables, by name.
    pub lists: BTreeMap<String, list::Lists>,
    /// What separates a list variable's entries (`:` unless the patch says otherwise).
    pub separator: String,
}

/// Loads and checks an `env` patch.toml; a bad `[env]` names its line.
pub fn load(src: &Source<'_>) -> Result<Patch, Error> {
    EnvPatch::load(src).map(Patch::new)
}

impl EnvPatch {
    fn load(src: &Source<'_>) -> Result<Self, Error> {
        let (text, origin) = (src.text, src.origin);
        let t: EnvToml = toml::from_str(text).map_err(|e| toml_error(origin, text, &e))?;
        let meta = meta::read(src, "env")?;
        let at = t.env.span().start;
        let env = t.env.into_inner();
        let separator = env.separator.clone().unwrap_or_else(|| ":".to_owned());
        if separator.is_empty() {
            return Err(at_line(origin, text, at, "[env]: the separator is empty"));
        }
        let lists = list::lists(&env.prepend, &env.append, &separator)
            .map_err(|m| at_line(origin, text, at, &format!("[env]: {m}")))?;
        if env.set.is_empty() && env.unset.is_empty() && lists.is_empty() {
            return Err(at_line(
                origin,
                text,
                at,
                "[env] sets, unsets, prepends and appends nothing",
            ));
        }
        if let Some(both) = lists
            .keys()
            .find(|n| env.set.contains_key(*n) || env.unset.contains(n))
        {
            return Err(at_line(
                origin,
                text,
                at,
                &format!("[env]: {both} is both a list to extend and set or unset"),
            ));
        }
        for name in env.set.keys().chain(&env.unset).chain(lists.keys()) {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(at_line(
                    origin,
                    text,
                    at,
                    &format!("[env]: {name:?} is not a variable name"),
                ));
            }
        }
        if let Some(both) = env.unset.iter().find(|n| env.set.contains_key(*n)) {
            return Err(at_line(
                origin,
                text,
                at,
                &format!("[env]: {both} is both set and unset"),
            ));
        }
        Ok(EnvPatch {
            meta,
            set: env.set,
            unset: env.unset,
            lists,
            separator,
        })
    }

    /// The config with `Env` edited and an `empty_layer` history entry appended, or `None` when
    /// `Env` already says what this patch says (already patched). A variable that is set keeps
    /// its position; a new one is appended; an unset one is removed wherever it appears; a list
    /// variable gets only the entries it lacks.
    pub fn edit_config(&self, config: &Value) -> Result<Option<Value>, String> {
        Ok(self.edit(config)?.map(|(v, _)| v))
    }

    /// [`EnvPatch::edit_config`], with a note per variable changed.
    pub fn edit(&self, config: &Value) -> Result<Option<(Value, Vec<String>)>, String> {
        let env: Vec<String> = match config.get("config").and_then(|c| c.get("Env")) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("config.Env holds a non-string entry {v}"))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(format!("config.Env is not a list but {other}")),
        };
        let (out, notes) = self.edit_env(&env)?;
        if out == env {
            return Ok(None);
        }
        let mut new = config.clone();
        let root = new
            .as_object_mut()
            .ok_or_else(|| "the image config is not a JSON object".to_owned())?;
        let cfg = root
            .entry("config")
            .or_insert_with(|| Value::Object(Default::default()));
        if cfg.is_null() {
            *cfg = Value::Object(Default::default());
        }
        let cfg = cfg
            .as_object_mut()
            .ok_or_else(|| "config.config is not a JSON object".to_owned())?;
        cfg.insert(
            "Env".to_owned(),
            Value::Array(out.into_iter().map(Value::String).collect()),
        );
        let entry = json!({
            "created": self.meta.mtime,
            "created_by": format!("runner-patch: {} (ENV {})", self.meta.id, self.what().join(" ")),
            "comment": self.meta.title,
            "empty_layer": true,
        });
        match root
            .entry("history")
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            Value::Array(h) => h.push(entry),
            _ => return Err("config.history is not a list".to_owned()),
        }
        Ok(Some((new, notes)))
    }

    /// `Env` as this patch leaves it, and a note per variable it changes.
    fn edit_env(&self, env: &[String]) -> Result<(Vec<String>, Vec<String>), String> {
        let name_of = |e: &str| e.split_once('=').map_or(e, |(n, _)| n).to_owned();
        let mut out: Vec<String> = Vec::with_capacity(env.len() + self.set.len());
        let mut notes = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for entry in env {
            let name = name_of(entry);
            if self.unset.contains(&name) {
                notes.push(format!("{name} unset"));
                continue;
            }
            match self.set.get(&name) {
                Some(v) if seen.insert(name.clone()) => {
                    let new = format!("{name}={v}");
                    if *entry != new {
                        notes.push(new.clone());
                    }
                    out.push(new);
                }
                Some(_) => {} // a duplicate of a variable being set: one entry is enough
                None => out.push(entry.clone()),
            }
        }
        for (name, v) in &self.set {
            if !seen.contains(name) {
                out.push(format!("{name}={v}"));
                notes.push(format!("{name}={v}"));
            }
        }
        for (name, lists) in &self.lists {
            let at: Vec<usize> = (0..out.len())
                .filter(|i| name_of(&out[*i]) == *name)
                .collect();
            if at.len() > 1 {
                return Err(format!(
                    "config.Env lists {name} {} times; refusing to guess which one the container uses",
                    at.len()
                ));
            }
            let current = at
                .first()
                .map(|i| out[*i].split_once('=').map_or("", |(_, v)| v).to_owned());
            if let Some((value, note)) = list::extend(current.as_deref(), lists, &self.separator) {
                let entry = format!("{name}={value}");
                match at.first() {
                    Some(i) => out[*i] = entry,
                    None => out.push(entry),
                }
                notes.push(format!("{name}: {note}"));
            }
        }
        notes.dedup();
        Ok((out, notes))
    }

    /// The patch as `ENV` words: `N=V`, `-N` for an unset one, `PATH=/x:${PATH}` for a list.
    fn what(&self) -> Vec<String> {
        let mut what: Vec<String> = self.set.iter().map(|(n, v)| format!("{n}={v}")).collect();
        what.extend(self.unset.iter().map(|n| format!("-{n}")));
        what.extend(
            self.lists
                .iter()
                .map(|(n, l)| list::as_env_line(n, l, &self.separator)),
        );
        what
    }
}

impl PatchKind for EnvPatch {
    fn meta(&self) -> &Meta {
        &self.meta
    }

    fn wanted(&self) -> Vec<String> {
        Vec::new()
    }

    fn decide(&self, tree: &dyn Tree) -> Verdict {
        let Some(config) = tree.config() else {
            return Verdict::refused("an env patch edits the image config, and there is none here");
        };
        match self.edit(config) {
            Ok(Some((new, notes))) => Verdict::patched(Vec::new(), Some(new), notes),
            Ok(None) => Verdict::already_patched(format!(
                "config Env already carries patch {}",
                self.meta.id
            )),
            Err(reason) => Verdict::refused(reason),
        }
    }

    fn adds_layer(&self) -> bool {
        false
    }

    fn edit_config(&self, config: &Value) -> Result<Option<Value>, Error> {
        EnvPatch::edit_config(self, config).map_err(|e| Error::new(ErrorKind::Invalid, e))
    }

    fn describe(&self) -> Description {
        let side = |f: fn(&list::Lists) -> &Vec<String>| -> BTreeMap<&String, String> {
            self.lists
                .iter()
                .filter(|(_, l)| !f(l).is_empty())
                .map(|(n, l)| (n, f(l).join(&self.separator)))
                .collect()
        };
        let fields = json!({"set": self.set, "unset": self.unset,
                            "prepend": side(|l| &l.prepend), "append": side(|l| &l.append),
                            "separator": self.separator});
        Description {
            fields: fields.as_object().cloned().unwrap_or_default(),
            lines: vec![("kind", "env".to_owned()), ("env", self.what().join(" "))],
        }
    }
}

#[cfg(test)]
mod tests;
