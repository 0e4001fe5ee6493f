//! The decision of a `wheels` patch on one platform of an image: where each locked package
//! goes (the dir holding its installed dist, else `package`'s, else `target`), which wheel fits
//! the platform, whether everything is already there (every locked version visible with the
//! files its `RECORD` hashes, every `remove` gone), and else the one layer pip's install and
//! uninstall would leave, checked like pip: unmet `Requires-Dist` refuse, what `pip check`
//! would report is a warning.

use std::collections::{BTreeMap, BTreeSet};

use super::dists::{self, site_of, Present};
use super::install::{self, Installed};
use super::lock::{LockedWheel, Package};
use super::requires::{self, Metadata};
use super::spec::Spec;
use super::target::{self, Target};
use super::uninstall::{self, Context};
use super::{filename, tags, wheel};
use crate::patch::dist::{Dist, InstalledWheel};
use crate::patch::meta::Meta;
use crate::patch::tree::Tree;
use crate::patch::verdict::{About, Change, Verdict};

/// One locked package that applies to this platform, with its wheel and target.
struct Chosen<'a> {
    pkg: &'a Package,
    wheel: &'a LockedWheel,
    target: Target,
    /// The installed dist of the same name, if any.
    old: Option<&'a Present>,
}

/// A `wheels` patch deciding on one platform.
pub struct Decider<'a> {
    pub meta: &'a Meta,
    pub spec: &'a Spec,
}

impl Decider<'_> {
    /// The install dir of a package named `name` (normalized): pip's order.
    fn site_for(&self, name: &str, dists: &[Present]) -> Result<String, String> {
        let by_name = |n: &str| {
            dists
                .iter()
                .find(|d| requires::normalize(&d.meta.name) == n)
                .map(|d| site_of(&d.dist).to_owned())
        };
        if let Some(s) = by_name(name) {
            return Ok(s);
        }
        if let Some(s) = self
            .meta
            .package
            .as_deref()
            .and_then(|p| by_name(&requires::normalize(p)))
        {
            return Ok(s);
        }
        if let Some(t) = &self.spec.target {
            return Ok(t.clone());
        }
        Err(format!(
            "no installed {name} tells where to install it: set `package` (a distribution the image has) or `target` in patch.toml"
        ))
    }

    /// The platform as seen from `site`, detected once per site.
    fn target_at(
        &self,
        tree: &dyn Tree,
        site: &str,
        cache: &mut BTreeMap<String, Target>,
    ) -> Result<Target, String> {
        if let Some(t) = cache.get(site) {
            return Ok(t.clone());
        }
        let t = target::detect(tree, site, self.spec.interpreter.as_deref())?;
        cache.insert(site.to_owned(), t.clone());
        Ok(t)
    }

    /// The locked packages that apply here, each with its wheel; `Err` is a refusal.
    fn choose<'a>(
        &'a self,
        tree: &dyn Tree,
        dists: &'a [Present],
    ) -> Result<Vec<Chosen<'a>>, String> {
        let Some((_, lock)) = &self.spec.lock else {
            return Ok(Vec::new());
        };
        let mut cache = BTreeMap::new();
        let mut out = Vec::new();
        let sites: Vec<Result<String, String>> = lock
            .packages
            .iter()
            .map(|p| self.site_for(&requires::normalize(&p.name), dists))
            .collect();
        // The platform any package's dir shows: a package whose marker leaves it out needs
        // no dir of its own, and the lock's requires-python is judged on it.
        let any = match sites.iter().find_map(|s| s.as_ref().ok()) {
            Some(site) => Some(self.target_at(tree, site, &mut cache)?),
            None => None,
        };
        if let (Some(rp), Some(t)) = (&lock.requires_python, &any) {
            if !requires::python_ok(rp, t)? {
                return Err(format!(
                    "the lock's requires-python {rp} excludes the image's Python {}",
                    t.python_full
                ));
            }
        }
        for (pkg, site) in lock.packages.iter().zip(sites) {
            let name = requires::normalize(&pkg.name);
            let site = match (site, &any) {
                (Ok(site), _) => site,
                (Err(e), Some(t)) if requires::applies(pkg.marker.as_deref(), t)? => return Err(e),
                (Err(_), Some(_)) => continue,
                (Err(e), None) => return Err(e),
            };
            let target = self.target_at(tree, &site, &mut cache)?;
            if !requires::applies(pkg.marker.as_deref(), &target)? {
                continue;
            }
            if let Some(rp) = &pkg.requires_python {
                if !requires::python_ok(rp, &target)? {
                    return Err(format!(
                        "{} needs Python {rp}, the image has {}",
                        pkg.name, target.python_full
                    ));
                }
            }
            let wheel = tags::choose(pkg, &target)?;
            let old = dists
                .iter()
                .find(|d| requires::normalize(&d.meta.name) == name && site_of(&d.dist) == site);
            out.push(Chosen {
                pkg,
                wheel,
                target,
                old,
            });
        }
        Ok(out)
    }

    /// Whether `c` is installed at its locked version with every hashed file as its `RECORD`
    /// says; `Err` names the first file that differs.
    fn in_place(&self, tree: &dyn Tree, c: &Chosen<'_>) -> Result<bool, String> {
        let Some(old) = c.old else {
            return Ok(false);
        };
        let locked = match (&c.pkg.version, filename::parse_name(&c.wheel.filename)) {
            (Some(v), _) => v.clone(),
            (None, Ok(n)) => n.version,
            (None, Err(e)) => return Err(e),
        };
        if !wheel::same_version(&old.meta.version, &locked) {
            return Ok(false);
        }
        Ok(dists::tampered(tree, &old.dist)?.is_none())
    }

    /// The wheel file on this machine: its `path`, or where the run fetched its `url`.
    fn wheel_file(&self, w: &LockedWheel) -> Result<std::path::PathBuf, String> {
        if let Some(p) = &w.path {
            return Ok(p.clone());
        }
        let dest = wheel::cached(&w.sha256);
        if dest.is_file() {
            Ok(dest)
        } else {
            Err(format!(
                "wheel {} was not fetched before the images were read",
                w.filename
            ))
        }
    }

    /// The decision on one platform; `Err` is a refusal.
    pub fn decide(&self, tree: &dyn Tree) -> Result<Verdict, String> {
        let dists = dists::installed(tree);
        let chosen = self.choose(tree, &dists)?;
        let removed: Vec<&Present> = self
            .spec
            .remove
            .iter()
            .filter_map(|r| {
                dists
                    .iter()
                    .find(|d| requires::normalize(&d.meta.name) == *r)
            })
            .collect();
        let mut todo = Vec::new();
        for c in chosen {
            if !self.in_place(tree, &c)? {
                todo.push(c);
            }
        }
        let about = self.about(&todo, &dists);
        if todo.is_empty() && removed.is_empty() {
            return Ok(Verdict::already_patched(format!(
                "every locked package of patch {} is installed at its version with its files, and every removed one is gone",
                self.meta.id
            ))
            .about(about));
        }
        let mut v = self.change(tree, &todo, &removed, &dists)?;
        v.about = about;
        Ok(v)
    }

    /// What the map reports: the first changed dist's `.dist-info` and its version.
    fn about(&self, todo: &[Chosen<'_>], dists: &[Present]) -> About {
        let first = todo.first().and_then(|c| c.old).or_else(|| {
            self.spec.remove.iter().find_map(|r| {
                dists
                    .iter()
                    .find(|d| requires::normalize(&d.meta.name) == *r)
            })
        });
        About {
            file: first.map(|d| format!("/{}", d.dist.dir)),
            version: first.map(|d| d.meta.version.clone()),
            shape: None,
        }
    }

    /// The platform a remove-only patch is checked against: the first removed dist's.
    fn removal_target(
        &self,
        tree: &dyn Tree,
        removed: &[&Present],
    ) -> Result<Option<Target>, String> {
        match removed.first() {
            Some(r) => {
                let t = target::detect(tree, site_of(&r.dist), self.spec.interpreter.as_deref())?;
                Ok(Some(t))
            }
            None => Ok(None),
        }
    }

    /// Installs, uninstalls and the checks like pip's.
    fn change(
        &self,
        tree: &dyn Tree,
        todo: &[Chosen<'_>],
        removed: &[&Present],
        dists: &[Present],
    ) -> Result<Verdict, String> {
        let mut installs: Vec<(Installed, Metadata)> = Vec::new();
        let mut notes = Vec::new();
        for c in todo {
            let (i, meta, note) = self.install_one(c)?;
            installs.push((i, meta));
            notes.push(note);
        }
        let t = match todo.first() {
            Some(c) => c.target.clone(),
            None => match self.removal_target(tree, removed)? {
                Some(t) => t,
                None => return Err("nothing to install or remove".to_owned()),
            },
        };
        // What goes: the old versions of what is installed, and what is removed, each with
        // the prefix its files must lie under to be removed.
        let mut gone: Vec<(&Dist, String)> = todo
            .iter()
            .filter_map(|c| c.old.map(|o| (&o.dist, c.target.scheme.data.clone())))
            .collect();
        for r in removed {
            notes.push(format!("{} {} removed", r.meta.name, r.meta.version));
            gone.push((&r.dist, t.scheme.data.clone()));
        }
        let written: BTreeSet<String> = installs
            .iter()
            .flat_map(|(i, _)| i.written.iter().cloned())
            .collect();
        let is_gone = |d: &Dist| gone.iter().any(|(g, _)| *g == d);
        let mut owned = BTreeSet::new();
        for d in dists.iter().filter(|d| !is_gone(&d.dist)) {
            owned.extend(dists::record_paths(&d.dist)?);
        }
        let mut changes: Vec<Change> = installs
            .iter()
            .flat_map(|(i, _)| i.changes.iter().cloned())
            .collect();
        for (d, prefix) in &gone {
            let cx = Context {
                tree,
                written: &written,
                owned: &owned,
                scheme: vec![prefix.clone(), site_of(d).to_owned()],
            };
            changes.extend(uninstall::uninstall(d, &cx)?);
        }
        let changes = crate::patch::bytecode::with_whiteouts(&changes, tree);
        let new: Vec<Metadata> = installs.into_iter().map(|(_, m)| m).collect();
        let before: Vec<Metadata> = dists.iter().map(|d| d.meta.clone()).collect();
        let mut after: Vec<Metadata> = dists
            .iter()
            .filter(|d| !is_gone(&d.dist))
            .map(|d| d.meta.clone())
            .collect();
        after.extend(new.iter().cloned());
        let missing = requires::missing(&new, &after, &t);
        if !missing.is_empty() {
            return Err(missing.join("; "));
        }
        let mut v = Verdict::patched(changes, None, notes);
        v.warnings = requires::broken(&new, &before, &after, &t);
        v.installed = installed_wheels(todo, &new);
        Ok(v)
    }

    /// Opens and checks one chosen wheel and installs it: the changes, its metadata, a note.
    fn install_one(&self, c: &Chosen<'_>) -> Result<(Installed, Metadata, String), String> {
        let file = self.wheel_file(c.wheel)?;
        let name = filename::parse_name(&c.wheel.filename)?;
        let w = wheel::open(
            &file,
            &c.wheel.filename,
            &c.wheel.sha256,
            &name.dist,
            &name.version,
        )?;
        let meta = requires::parse_metadata(&w.metadata)
            .map_err(|e| format!("wheel {}: METADATA: {e}", w.filename))?;
        // The wheel file names its tags: plan says which one lands over what.
        let file = &c.wheel.filename;
        let note = match c.old {
            Some(o) => format!("{} {} -> {} ({file})", w.name, o.meta.version, w.version),
            None => format!("{} {} new ({file})", w.name, w.version),
        };
        let direct = c.wheel.direct.then_some(c.wheel.url.as_deref()).flatten();
        let i = install::install(
            &w,
            &c.target,
            self.meta.mtime_secs,
            direct.map(|u| direct_url(u, &c.wheel.sha256)),
        )?;
        Ok((i, meta, note))
    }
}

/// The `direct_url.json` of a wheel installed from URL (PEP 610): the URL without credentials
/// and the archive's hash, as pip writes it.
fn direct_url(url: &str, sha256: &str) -> Vec<u8> {
    let url = match reqwest::Url::parse(url) {
        Ok(mut u) => {
            // Setting empty credentials cannot fail on an http(s) URL with a host.
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => super::spec::redact(url),
    };
    let doc = serde_json::json!({
        "archive_info": {"hash": format!("sha256={sha256}"), "hashes": {"sha256": sha256}},
        "url": url,
    });
    doc.to_string().into_bytes()
}

/// What the map and the statement say was installed: each chosen wheel with the name and
/// version its METADATA gives, its URL without credentials.
fn installed_wheels(todo: &[Chosen<'_>], new: &[Metadata]) -> Vec<InstalledWheel> {
    todo.iter()
        .zip(new)
        .map(|(c, m)| InstalledWheel {
            name: m.name.clone(),
            version: m.version.clone(),
            wheel: c.wheel.filename.clone(),
            sha256: c.wheel.sha256.clone(),
            url: c.wheel.url.as_deref().map(super::spec::redact),
        })
        .collect()
}
