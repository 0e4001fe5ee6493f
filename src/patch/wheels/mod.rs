//! The `wheels` kind: the wheels of a PEP 751 lock installed as `pip install --no-deps
//! --no-compile` would install them, per platform, and distributions uninstalled as pip
//! would, in one layer per patch. Data side: [`lock`] (PEP 751), [`filename`] (wheel file
//! names), [`tags`] (platform tags, the choice), [`target`] (what one platform offers),
//! [`requires`] (METADATA, markers, requirement checks). Install side: [`spec`]
//! (`patch.toml`), [`wheel`] (a wheel opened and checked in one streamed pass), [`record`]
//! (`RECORD`), [`install`] (the files pip leaves), [`uninstall`] (the whiteouts pip's removal
//! amounts to), [`dists`] (what the image has installed), [`decide`] (one platform's
//! decision). Wheels given by URL are inputs, fetched and checked before any image is read,
//! kept in a cache named by their sha256.

use serde_json::json;

pub mod decide;
pub mod dists;
pub mod filename;
pub mod install;
pub mod lock;
pub mod record;
pub mod requirements;
pub mod requires;
pub mod spec;
pub mod tags;
pub mod target;
pub mod uninstall;
pub mod wheel;

use crate::patch::dist::{Dist, Input};
use crate::patch::error::Error;
use crate::patch::kind::{Description, Patch, PatchKind, Refusing};
use crate::patch::meta::{self, Meta};
use crate::patch::request::{Request, Resolution};
use crate::patch::source::Source;
use crate::patch::tree::{Layered, Tree};
use crate::patch::verdict::{Checked, Verdict};
use spec::Spec;

/// A loaded `wheels` patch.
#[derive(Debug, Clone)]
pub struct WheelsPatch {
    pub meta: Meta,
    pub spec: Spec,
    /// For a `requirements` patch, what uv resolved on this platform (its lock is `spec.lock`).
    pub resolution: Option<Resolution>,
}

/// Loads a `wheels` patch.toml and its lock.
pub fn load(src: &Source<'_>) -> Result<Patch, Error> {
    let mut meta = meta::read(src, "wheels")?;
    let spec = spec::read(src)?;
    if let Some((name, lock)) = &spec.lock {
        if let Some(p) = lock
            .packages
            .iter()
            .find(|p| spec.remove.contains(&requires::normalize(&p.name)))
        {
            return Err(Error::new(
                crate::patch::error::ErrorKind::Invalid,
                format!(
                    "{}: {} is both locked in {name} and listed in remove",
                    src.origin, p.name
                ),
            ));
        }
    }
    meta.definition_digest = src.definition_digest(&[&spec.lock_bytes]);
    Ok(Patch::new(WheelsPatch {
        meta,
        spec,
        resolution: None,
    }))
}

impl WheelsPatch {
    /// Where uv would install on this platform: `target`, else the dir holding `package`'s
    /// distribution, else the one dir holding the most installed distributions.
    fn resolution_site(&self, present: &[dists::Present]) -> Result<String, String> {
        if let Some(t) = &self.spec.target {
            return Ok(t.clone());
        }
        if let Some(p) = self.meta.package.as_deref().map(requires::normalize) {
            if let Some(d) = present
                .iter()
                .find(|d| requires::normalize(&d.meta.name) == p)
            {
                return Ok(dists::site_of(&d.dist).to_owned());
            }
        }
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        for d in present {
            *counts.entry(dists::site_of(&d.dist)).or_default() += 1;
        }
        let most = counts.values().copied().max().unwrap_or(0);
        let top: Vec<&str> = counts
            .iter()
            .filter(|(_, n)| **n == most)
            .map(|(s, _)| *s)
            .collect();
        match top.as_slice() {
            [one] => Ok((*one).to_owned()),
            [] => Err(
                "the image shows no installed distribution to resolve against: set `target` (the install dir) in patch.toml"
                    .to_owned(),
            ),
            many => Err(format!(
                "installed distributions lie in several install dirs as many times each (/{}): set `target` in patch.toml",
                many.join(", /")
            )),
        }
    }

    /// The resolution request of a `requirements` patch on the platform `tree` shows.
    fn make_request(
        &self,
        reqs: &requirements::Requirements,
        tree: &dyn Tree,
    ) -> Result<Request, String> {
        let lines = reqs.for_platform(tree.config())?;
        let present = dists::installed(tree);
        let site = self.resolution_site(&present)?;
        let t = target::detect(tree, &site, self.spec.interpreter.as_deref())?;
        let glibc = t.glibc.ok_or_else(|| {
            "the image's glibc could not be read from its libc.so.6: uv needs it to choose manylinux wheels".to_owned()
        })?;
        let installed = present
            .iter()
            .filter(|p| dists::site_of(&p.dist) == site)
            .filter_map(|p| {
                let name = p.dist.dir.rsplit('/').next()?.to_owned();
                Some((name, p.dist.files.get("METADATA")?.to_vec()))
            })
            .collect();
        Ok(Request {
            patch: self.meta.id.clone(),
            folder: self.spec.folder.clone(),
            lines,
            index_args: self.spec.index.uv_args(),
            python: t.python_full,
            arch: t.arch,
            glibc,
            site,
            installed,
        })
    }

    /// The dists the image shows at a locked version of a locked package.
    fn locked_dists(&self, tree: &dyn Tree) -> Vec<Dist> {
        let Some((_, lock)) = &self.spec.lock else {
            return Vec::new();
        };
        dists::installed(tree)
            .into_iter()
            .filter(|d| {
                lock.packages.iter().any(|p| {
                    requires::normalize(&p.name) == requires::normalize(&d.meta.name)
                        && p.version
                            .as_deref()
                            .is_none_or(|v| wheel::same_version(v, &d.meta.version))
                })
            })
            .map(|d| d.dist)
            .collect()
    }
}

impl PatchKind for WheelsPatch {
    fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The interpreters and `pyvenv.cfg` target detection looks for under an install prefix.
    fn wanted(&self) -> Vec<String> {
        target::probe_suffixes()
    }

    fn paths(&self) -> Vec<String> {
        target::probe_paths()
    }

    fn distributions(&self) -> bool {
        true
    }

    /// What a wheels layer may hold, known before its wheels are opened: paths inside an
    /// install dir (`site-packages`, `dist-packages`) and the scheme's other homes (`bin/`,
    /// `include/`, `share/`, `etc/` under a prefix, never at `/`: scripts, headers, `.data/data`). Each file a
    /// RECORD lists is then checked by its hash (`check`).
    fn may_write(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('/').collect();
        let dirs = &parts[..parts.len().saturating_sub(1)];
        dirs.iter()
            .any(|d| matches!(*d, "site-packages" | "dist-packages"))
            || dirs
                .iter()
                .skip(1)
                .any(|d| matches!(*d, "bin" | "include" | "share" | "etc"))
    }

    fn hashes(&self, tree: &dyn Tree) -> Vec<String> {
        let mut out = Vec::new();
        for d in self.locked_dists(tree) {
            if let Ok(paths) = dists::hashed_paths(&d) {
                out.extend(paths.into_iter().map(|(p, _)| p));
            }
        }
        out
    }

    /// Every wheel given by URL whose tags could fit a Linux x86_64 or aarch64 image.
    fn inputs(&self) -> Vec<Input> {
        let Some((_, lock)) = &self.spec.lock else {
            return Vec::new();
        };
        let linux = |plat: &str| {
            plat == "any"
                || (plat.contains("linux")
                    && (plat.ends_with("x86_64") || plat.ends_with("aarch64")))
        };
        lock.packages
            .iter()
            .flat_map(|p| p.wheels.iter())
            .filter(|w| {
                filename::parse_name(&w.filename)
                    .map(|n| n.tags.iter().any(|(_, _, plat)| linux(plat)))
                    .unwrap_or(true)
            })
            .filter_map(|w| {
                Some(Input {
                    url: self.spec.index.with_credentials(w.url.as_deref()?),
                    sha256: w.sha256.clone(),
                    dest: wheel::cached(&w.sha256),
                })
            })
            .collect()
    }

    fn request(&self, tree: &dyn Tree) -> Option<Result<Request, String>> {
        let reqs = self.spec.requirements.as_ref()?;
        Some(self.make_request(reqs, tree))
    }

    fn resolved(&self, answer: Result<Resolution, String>) -> Patch {
        let refusing = |why: String| {
            Patch::new(Refusing {
                meta: self.meta.clone(),
                why,
            })
        };
        let res = match answer {
            Ok(r) => r,
            Err(why) => return refusing(why),
        };
        let lock = match lock::parse(&res.lock, "uv's resolution", std::path::Path::new("/")) {
            Ok(l) => l,
            Err(e) => return refusing(format!("uv's lock does not read: {e}")),
        };
        let mut spec = self.spec.clone();
        spec.lock = Some(("uv's resolution".to_owned(), lock));
        spec.target.get_or_insert_with(|| res.site.clone());
        Patch::new(WheelsPatch {
            meta: self.meta.clone(),
            spec,
            resolution: Some(res),
        })
    }

    fn decide(&self, tree: &dyn Tree) -> Verdict {
        if self.spec.requirements.is_some() && self.resolution.is_none() {
            return Verdict::refused(format!(
                "patch {}'s requirement lines were not resolved for this platform",
                self.meta.id
            ));
        }
        let decider = decide::Decider {
            meta: &self.meta,
            spec: &self.spec,
        };
        let mut v = match decider.decide(tree) {
            Ok(v) => v,
            Err(reason) => Verdict::refused(reason),
        };
        if let Some(r) = &self.resolution {
            v.warnings
                .extend(r.warnings.iter().map(|w| format!("uv: {w}")));
            if v.outcome == crate::patch::outcome::Outcome::Patched {
                v.notes.insert(0, r.source.clone());
                v.reason = v.notes.join("; ");
            }
            if v.outcome == crate::patch::outcome::Outcome::AlreadyPatched {
                v.reason = format!(
                    "uv finds the requirement lines of patch {} met by the image{}{}",
                    self.meta.id,
                    if self.spec.remove.is_empty() {
                        ""
                    } else {
                        ", and every removed distribution is gone"
                    },
                    match r.source.strip_prefix("from ") {
                        Some(file) => format!(" (as {file} says)"),
                        None => String::new(),
                    }
                );
            }
        }
        v
    }

    /// Deciding again must find it already patched; a file that differs from its RECORD is
    /// named.
    fn check(&self, image: &dyn Layered) -> Checked {
        let mut checked = Checked::default();
        if image.refusal().is_some() {
            return checked;
        }
        for d in self.locked_dists(image) {
            match dists::tampered(image, &d) {
                Ok(None) => {}
                Ok(Some(line)) | Err(line) => checked.problems.push(line),
            }
        }
        let v = self.decide(image);
        if checked.problems.is_empty()
            && v.outcome != crate::patch::outcome::Outcome::AlreadyPatched
        {
            checked.problems.push(format!(
                "the image does not carry what patch {} makes ({}: {})",
                self.meta.id,
                v.outcome,
                v.summary()
            ));
        }
        checked.file = v.about.file;
        checked
    }

    fn describe(&self) -> Description {
        let mut lines = vec![("kind", "wheels".to_owned())];
        let mut packages = Vec::new();
        if let Some(r) = &self.spec.requirements {
            if let Some(f) = &r.file {
                lines.push(("requirements", f.clone()));
            }
            for l in &r.lines {
                lines.push(("line", l.text.clone()));
            }
            for u in self.spec.index.shown() {
                lines.push(("index", u));
            }
            if self.spec.index.no_index {
                lines.push(("index", "none (no-index)".to_owned()));
            }
        }
        if let Some((name, lock)) = &self.spec.lock {
            lines.push(("lock", name.clone()));
            for p in &lock.packages {
                let v = p.version.clone().unwrap_or_default();
                lines.push((
                    "package",
                    format!("{} {v} ({} wheel(s))", p.name, p.wheels.len()),
                ));
                packages
                    .push(json!({"name": p.name, "version": p.version, "wheels": p.wheels.len()}));
            }
        }
        if !self.spec.remove.is_empty() {
            lines.push(("remove", self.spec.remove.join(", ")));
        }
        if let Some(t) = &self.spec.target {
            lines.push(("target", format!("/{t}")));
        }
        if let Some(i) = &self.spec.interpreter {
            lines.push(("interpreter", i.clone()));
        }
        let requirements = self.spec.requirements.as_ref().map(|r| {
            json!({
                "file": r.file,
                "lines": r.lines.iter().map(|l| &l.text).collect::<Vec<_>>(),
                "index": self.spec.index.shown(),
                "no_index": self.spec.index.no_index,
            })
        });
        let mut fields = json!({
            "lock": self.spec.lock.as_ref().map(|(n, _)| n),
            "packages": packages,
            "remove": self.spec.remove,
            "target": self.spec.target.as_ref().map(|t| format!("/{t}")),
            "interpreter": self.spec.interpreter,
        });
        if let (Some(r), Some(map)) = (requirements, fields.as_object_mut()) {
            map.insert("requirements".to_owned(), r);
        }
        Description {
            fields: fields.as_object().cloned().unwrap_or_default(),
            lines,
        }
    }
}

#[cfg(test)]
mod tests;
