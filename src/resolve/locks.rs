//! Lock files a `requirements` patch carries next to its lines (`runner-patch lock`): uv's PEP
//! 751 lock of one environment, and a `[tool.runner-patch]` table saying which environment
//! (Python, architecture, glibc, install dir, the installed set, the lines) and which images
//! it was made for. Read here to answer a platform without uv, written here by `lock`: the
//! format lives in this one file. A lock holds no credentials: uv writes none, and index URLs
//! are recorded redacted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::error::Error;
use crate::patch::wheels::requires;
use crate::patch::{DistChange, Request, Resolution};

/// The table's key under `[tool]`.
const TOOL: &str = "runner-patch";

/// What a lock was made for; two platforms share a lock when these are equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Environment {
    pub patch: String,
    pub python: String,
    pub architecture: String,
    pub glibc: String,
    pub site: String,
    /// The expanded requirement lines.
    pub requirements: Vec<String>,
    /// `name==version` of each installed distribution uv saw, sorted.
    pub installed: Vec<String>,
    /// sha256 over every installed `.dist-info` name and its `METADATA`.
    pub installed_digest: String,
}

/// The whole `[tool.runner-patch]` table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Table {
    #[serde(flatten)]
    environment: Environment,
    /// `REPO:TAG PLATFORM` of each image and platform the lock was made for.
    images: Vec<String>,
    #[serde(default)]
    changes: Vec<ChangeRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChangeRow {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    to: Option<String>,
}

/// One lock file of a patch folder, read.
#[derive(Debug, Clone)]
pub struct FolderLock {
    pub file: String,
    pub environment: Environment,
    pub images: Vec<String>,
    text: String,
    changes: Vec<DistChange>,
}

/// The environment a request describes.
pub fn environment(req: &Request) -> Environment {
    let mut installed: Vec<String> = req
        .installed
        .iter()
        .filter_map(|(_, m)| requires::parse_metadata(m).ok())
        .map(|m| format!("{}=={}", requires::normalize(&m.name), m.version))
        .collect();
    installed.sort();
    let mut sorted: Vec<&(String, Vec<u8>)> = req.installed.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = sha2::Sha256::new();
    for (dir, meta) in sorted {
        h.update(dir.as_bytes());
        h.update([0]);
        h.update(sha2::Sha256::digest(meta));
    }
    Environment {
        patch: req.patch.clone(),
        python: req.python.clone(),
        architecture: req.arch.clone(),
        glibc: format!("{}.{}", req.glibc.0, req.glibc.1),
        site: format!("/{}", req.site),
        requirements: req.lines.clone(),
        installed,
        installed_digest: format!("sha256:{}", hex::encode(h.finalize())),
    }
}

/// How `have` differs from `want` (the platform's), named for a person; `None` when equal.
pub fn difference(have: &Environment, want: &Environment) -> Option<String> {
    let pairs = [
        ("patch", &have.patch, &want.patch),
        ("Python", &have.python, &want.python),
        ("architecture", &have.architecture, &want.architecture),
        ("glibc", &have.glibc, &want.glibc),
        ("install dir", &have.site, &want.site),
    ];
    for (what, h, w) in pairs {
        if h != w {
            return Some(format!("{what} {h} (the platform's: {w})"));
        }
    }
    if have.requirements != want.requirements {
        return Some(format!(
            "the lines {:?} (the platform's: {:?})",
            have.requirements, want.requirements
        ));
    }
    if have.installed_digest != want.installed_digest {
        let gone: Vec<&String> = have
            .installed
            .iter()
            .filter(|i| !want.installed.contains(i))
            .collect();
        let new: Vec<&String> = want
            .installed
            .iter()
            .filter(|i| !have.installed.contains(i))
            .collect();
        return Some(format!(
            "another installed set (the platform has {} and lacks {})",
            list(&new),
            list(&gone)
        ));
    }
    None
}

fn list(items: &[&String]) -> String {
    match items {
        [] => "nothing else".to_owned(),
        some if some.len() > 4 => format!(
            "{} and {} more",
            some[..4]
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            some.len() - 4
        ),
        some => some
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

impl FolderLock {
    /// The resolution this lock answers with.
    pub fn resolution(&self, site: &str) -> Resolution {
        Resolution {
            lock: self.text.clone(),
            changes: self.changes.clone(),
            warnings: Vec::new(),
            site: site.to_owned(),
            source: format!("from {}", self.file),
        }
    }
}

/// Whether `name` is a PEP 751 lock file name.
fn is_lock_name(name: &str) -> bool {
    name == "pylock.toml"
        || name
            .strip_prefix("pylock.")
            .and_then(|r| r.strip_suffix(".toml"))
            .is_some_and(|n| !n.is_empty() && !n.contains('.'))
}

/// The lock files of `folder` that carry this tool's table (others are not ours: ignored).
pub fn read_folder(folder: &Path) -> Result<Vec<FolderLock>, Error> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(folder)
        .map_err(|e| Error(format!("cannot list {}: {e}", folder.display())))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_lock_name(n))
        .collect();
    names.sort();
    for name in names {
        let path = folder.join(&name);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error(format!("cannot read {}: {e}", path.display())))?;
        let doc: toml::Table = toml::from_str(&text)
            .map_err(|e| Error(format!("{}: {}", path.display(), e.message())))?;
        let Some(table) = doc.get("tool").and_then(|t| t.get(TOOL)) else {
            continue;
        };
        let t: Table = table.clone().try_into().map_err(|e: toml::de::Error| {
            Error(format!(
                "{}: [tool.{TOOL}]: {}",
                path.display(),
                e.message()
            ))
        })?;
        out.push(FolderLock {
            file: name,
            environment: t.environment,
            images: t.images,
            text,
            changes: t
                .changes
                .into_iter()
                .map(|c| DistChange {
                    name: c.name,
                    from: c.from,
                    to: c.to,
                })
                .collect(),
        });
    }
    Ok(out)
}

/// One lock to write: the environment, uv's lock, what it changes, and the images it covers.
pub struct Entry {
    pub environment: Environment,
    pub resolution: Resolution,
    pub images: Vec<String>,
}

/// Writes one lock file per entry into `folder` (`pylock.toml` when there is one, else
/// `pylock.<architecture>-py<XY>[-N].toml`), each written whole then renamed into place; lock
/// files of this patch from an earlier `lock` are removed. Returns (file, images) per entry.
pub fn write_folder(folder: &Path, entries: &[Entry]) -> Result<Vec<(String, Vec<String>)>, Error> {
    let names = file_names(entries);
    let keep: Vec<&String> = names.iter().collect();
    for old in read_folder(folder)? {
        let ours = entries
            .iter()
            .any(|e| e.environment.patch == old.environment.patch);
        if ours && !keep.contains(&&old.file) {
            let p = folder.join(&old.file);
            std::fs::remove_file(&p)
                .map_err(|e| Error(format!("cannot remove {}: {e}", p.display())))?;
        }
    }
    let mut out = Vec::new();
    for (entry, name) in entries.iter().zip(names) {
        let table = Table {
            environment: entry.environment.clone(),
            images: entry.images.clone(),
            changes: entry
                .resolution
                .changes
                .iter()
                .map(|c| ChangeRow {
                    name: c.name.clone(),
                    from: c.from.clone(),
                    to: c.to.clone(),
                })
                .collect(),
        };
        let mut tool = toml::Table::new();
        let value = toml::Value::try_from(&table)
            .map_err(|e| Error(format!("cannot write the lock table: {e}")))?;
        tool.insert(TOOL.to_owned(), value);
        let mut doc = toml::Table::new();
        doc.insert("tool".to_owned(), toml::Value::Table(tool));
        let tail = toml::to_string(&doc)
            .map_err(|e| Error(format!("cannot write the lock table: {e}")))?;
        let mut text = entry.resolution.lock.trim_end().to_owned();
        text.push_str("\n\n");
        text.push_str(&tail);
        let path = folder.join(&name);
        let tmp: PathBuf = folder.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, &text)
            .map_err(|e| Error(format!("cannot write {}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, &path)
            .map_err(|e| Error(format!("cannot write {}: {e}", path.display())))?;
        out.push((name, entry.images.clone()));
    }
    Ok(out)
}

/// `pylock.toml` for one entry; else a name per architecture and Python, numbered when two
/// environments share one.
fn file_names(entries: &[Entry]) -> Vec<String> {
    if entries.len() == 1 {
        return vec!["pylock.toml".to_owned()];
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    entries
        .iter()
        .map(|e| {
            let xy: String = e.environment.python.split('.').take(2).collect();
            let base = format!("{}-py{xy}", e.environment.architecture.replace('_', "-"));
            let n = seen.entry(base.clone()).or_default();
            *n += 1;
            if *n == 1 {
                format!("pylock.{base}.toml")
            } else {
                format!("pylock.{base}-{n}.toml")
            }
        })
        .collect()
}

/// The run's answers grouped into lock files: per patch folder, one entry per distinct
/// environment (images in the order asked, each once), in a stable order.
pub fn entries<'a>(
    answered: impl IntoIterator<Item = (&'a str, &'a Request, &'a Resolution)>,
) -> Result<BTreeMap<PathBuf, Vec<Entry>>, Error> {
    let mut out: BTreeMap<PathBuf, Vec<Entry>> = BTreeMap::new();
    for (label, request, resolution) in answered {
        let Some(folder) = &request.folder else {
            return Err(Error(format!(
                "patch {} is not a folder: its locks have nowhere to go",
                request.patch
            )));
        };
        let env = environment(request);
        let list = out.entry(folder.clone()).or_default();
        match list.iter_mut().find(|e| e.environment == env) {
            Some(e) => {
                if !e.images.iter().any(|i| i == label) {
                    e.images.push(label.to_owned());
                }
            }
            None => list.push(Entry {
                environment: env,
                resolution: resolution.clone(),
                images: vec![label.to_owned()],
            }),
        }
    }
    for list in out.values_mut() {
        list.sort_by(|a, b| {
            let key = |e: &Entry| {
                (
                    e.environment.architecture.clone(),
                    e.environment.python.clone(),
                    e.environment.installed_digest.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        for e in list.iter_mut() {
            e.images.sort();
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
