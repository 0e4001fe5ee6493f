//! The `env` kind: set or remove variables in the image config's `config.Env`. No layer: the
//! edit is a pure function over the config as a JSON value (key order and unknown fields kept),
//! plus a history entry marked `empty_layer`, as `docker build` records an `ENV` line.

use std::collections::BTreeMap;

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
}

/// An `env` patch: variables to set (in name order) and to remove.
#[derive(Debug, Clone)]
pub struct EnvPatch {
    pub meta: Meta,
    pub set: BTreeMap<String, String>,
    pub unset: Vec<String>,
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
        if env.set.is_empty() && env.unset.is_empty() {
            return Err(at_line(origin, text, at, "[env] sets and unsets nothing"));
        }
        for name in env.set.keys().chain(&env.unset) {
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
        })
    }

    /// The config with `Env` edited and an `empty_layer` history entry appended, or `None` when
    /// `Env` already says what this patch says (already patched). A variable that is set keeps
    /// its position; a new one is appended; an unset one is removed wherever it appears.
    pub fn edit_config(&self, config: &Value) -> Result<Option<Value>, String> {
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
        let name_of = |e: &str| e.split_once('=').map_or(e, |(n, _)| n).to_owned();
        let mut out: Vec<String> = Vec::with_capacity(env.len() + self.set.len());
        let mut seen = std::collections::BTreeSet::new();
        for entry in &env {
            let name = name_of(entry);
            if self.unset.contains(&name) {
                continue;
            }
            match self.set.get(&name) {
                Some(v) if seen.insert(name.clone()) => out.push(format!("{name}={v}")),
                Some(_) => {} // a duplicate of a variable being set: one entry is enough
                None => out.push(entry.clone()),
            }
        }
        for (name, v) in &self.set {
            if !seen.contains(name) {
                out.push(format!("{name}={v}"));
            }
        }
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
        let mut what: Vec<String> = self.set.iter().map(|(n, v)| format!("{n}={v}")).collect();
        what.extend(self.unset.iter().map(|n| format!("-{n}")));
        let entry = json!({
            "created": self.meta.mtime,
            "created_by": format!("runner-patch: {} (ENV {})", self.meta.id, what.join(" ")),
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
        Ok(Some(new))
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
        match self.edit_config(config) {
            Ok(Some(new)) => Verdict::patched(
                Vec::new(),
                Some(new),
                vec![format!("config Env edited by {}", self.meta.id)],
            ),
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
        let mut what: Vec<String> = self.set.iter().map(|(n, v)| format!("{n}={v}")).collect();
        what.extend(self.unset.iter().map(|n| format!("-{n}")));
        let fields = json!({"set": self.set, "unset": self.unset});
        Description {
            fields: fields.as_object().cloned().unwrap_or_default(),
            lines: vec![("kind", "env".to_owned()), ("env", what.join(" "))],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str, origin: &str) -> Result<EnvPatch, String> {
        EnvPatch::load(&Source {
            text,
            origin,
            folder: None,
        })
        .map_err(|e| e.to_string())
    }

    fn patch() -> EnvPatch {
        load(
            "id = \"nccl-env\"\nkind = \"env\"\ntitle = \"NCCL settings\"\n[env]\nset = { NCCL_P2P_DISABLE = \"1\", PATH = \"/opt/bin:/usr/bin\" }\nunset = [\"OLD\"]\n",
            "nccl-env/patch.toml",
        )
        .expect("loads")
    }

    const CONFIG: &str = r#"{"architecture":"amd64","config":{"User":"0","Env":["PATH=/usr/bin","OLD=x","KEEP=1=2"],"Labels":{"a":"b"}},"container_config":{"Env":["PATH=/usr/bin"]},"history":[{"created_by":"RUN x"}],"os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:00"]}}"#;

    #[test]
    fn edits_env_keeps_order_and_unknown_fields() {
        let config: Value = serde_json::from_str(CONFIG).expect("json");
        let new = patch()
            .edit_config(&config)
            .expect("edits")
            .expect("changed");
        assert_eq!(
            new["config"]["Env"],
            json!(["PATH=/opt/bin:/usr/bin", "KEEP=1=2", "NCCL_P2P_DISABLE=1"])
        );
        let keys: Vec<&String> = new.as_object().expect("object").keys().collect();
        assert_eq!(
            keys,
            [
                "architecture",
                "config",
                "container_config",
                "history",
                "os",
                "rootfs"
            ]
        );
        assert_eq!(new["container_config"]["Env"], json!(["PATH=/usr/bin"]));
        assert_eq!(new["rootfs"]["diff_ids"], json!(["sha256:00"]), "no layer");
        let last = &new["history"][1];
        assert_eq!(last["empty_layer"], json!(true));
        assert!(last["created_by"]
            .as_str()
            .is_some_and(|s| s.starts_with("runner-patch: nccl-env")));
        assert_eq!(
            patch().edit_config(&new).expect("edits"),
            None,
            "re-run: nothing to do"
        );
    }

    #[test]
    fn no_env_at_all_is_created() {
        let config = json!({"config": null, "rootfs": {"diff_ids": []}});
        let new = patch()
            .edit_config(&config)
            .expect("edits")
            .expect("changed");
        assert_eq!(
            new["config"]["Env"],
            json!(["NCCL_P2P_DISABLE=1", "PATH=/opt/bin:/usr/bin"])
        );
        assert_eq!(new["history"][0]["empty_layer"], json!(true));
    }

    #[test]
    fn bad_env_sections_name_their_line() {
        let e = load(
            "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\n[env]\nset = { A = \"1\" }\nunset = [\"A\"]\n",
            "e/patch.toml",
        )
        .expect_err("set and unset");
        assert!(
            e.starts_with("e/patch.toml:4: [env]: A is both set and unset"),
            "{e}"
        );
        let e = load(
            "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\n[env]\nset = { A = 1 }\n",
            "e/patch.toml",
        )
        .expect_err("not a string");
        assert!(e.starts_with("e/patch.toml:5: "), "{e}");
        let e = load(
            "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\nshape = 1\n[env]\nset = { A = \"1\" }\n",
            "e/patch.toml",
        )
        .expect_err("unknown field");
        assert!(e.starts_with("e/patch.toml:4: "), "{e}");
    }
}
