//! Requirement lines resolved for one platform of an image, by uv (never by code of this
//! tool): [`resolve`] is the one entry point. The image's installed distributions (their
//! `METADATA`, as the distributions scan kept them) are laid out as a bare site directory and
//! uv is asked, for the image's Python, architecture and glibc, what `uv pip install -r
//! requirements.txt` would change there (`--dry-run --output-format json --target`): installed
//! versions that satisfy are kept, the rest is uv's choice, wheels only. The distributions to
//! install are then pinned (`uv pip compile --no-deps --format pylock.toml`), which gives each
//! wheel's URL and sha256: a PEP 751 lock the `wheels` install path takes as it takes any.

mod error;
pub mod locks;
mod text;
pub mod uv;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::sync::{Mutex, OnceCell};

use crate::patch::{DistChange, Patch, Request, Resolution, Tree};
pub use error::Error;
pub use text::redact_all;
pub use uv::Uv;

/// Where a run's answers may come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A lock file of the patch folder made for the platform's environment, else uv.
    Auto,
    /// Only a lock file of the patch folder (`--locked`): no index is asked to resolve.
    Locked,
    /// Always uv, whatever lock files lie there (`runner-patch lock`).
    Fresh,
}

/// One answer of a run, kept for `runner-patch lock`: which image and platform asked, what,
/// and what came back.
#[derive(Debug, Clone)]
pub struct Asked {
    pub label: String,
    pub request: Request,
    pub answer: Result<Resolution, Error>,
}

/// The resolver of a run: uv found and checked once, when the first patch asks, each distinct
/// request answered once (platforms and tags with the same environment and lines share the
/// answer), a patch folder's lock files read once; every answer kept for `lock`.
#[derive(Debug)]
pub struct Resolver {
    idle: Duration,
    mode: Mode,
    uv: OnceCell<Result<Uv, Error>>,
    answers: Mutex<HashMap<Request, Result<Resolution, Error>>>,
    folders: Mutex<HashMap<std::path::PathBuf, Result<Vec<locks::FolderLock>, Error>>>,
    asked: Mutex<Vec<Asked>>,
    /// One fetch of resolved wheels at a time: platforms resolving to the same wheel share
    /// its file, fetched once.
    fetching: Mutex<()>,
}

impl Resolver {
    /// `idle`: how long uv may wait on a silent index (the run's idle timeout).
    pub fn new(idle: Duration, mode: Mode) -> Self {
        Resolver {
            idle,
            mode,
            uv: OnceCell::new(),
            answers: Mutex::default(),
            folders: Mutex::default(),
            asked: Mutex::default(),
            fetching: Mutex::default(),
        }
    }

    /// Every answer given, in order, once the run is over (while answers are still being
    /// given, none); kept only in `Mode::Fresh`, the mode of `lock`.
    pub fn asked(&self) -> Vec<Asked> {
        self.asked
            .try_lock()
            .map(|held| held.clone())
            .unwrap_or_default()
    }

    /// The lock files of `folder`, read once.
    async fn folder_locks(
        &self,
        folder: &std::path::Path,
    ) -> Result<Vec<locks::FolderLock>, Error> {
        let mut held = self.folders.lock().await;
        held.entry(folder.to_path_buf())
            .or_insert_with(|| locks::read_folder(folder))
            .clone()
    }

    /// The answer from the patch folder's locks: `Ok(None)` when none fits and uv may answer.
    async fn answer_from_locks(
        &self,
        req: &Request,
        label: &str,
    ) -> Result<Option<Resolution>, Error> {
        if self.mode == Mode::Fresh {
            return Ok(None);
        }
        let found = match &req.folder {
            Some(f) => self.folder_locks(f).await?,
            None => Vec::new(),
        };
        let ours: Vec<&locks::FolderLock> = found
            .iter()
            .filter(|l| l.environment.patch == req.patch)
            .collect();
        let want = locks::environment(req);
        if let Some(l) = ours
            .iter()
            .find(|l| locks::difference(&l.environment, &want).is_none())
        {
            return Ok(Some(l.resolution(&req.site)));
        }
        if self.mode == Mode::Auto {
            return Ok(None);
        }
        let folder = req
            .folder
            .as_deref()
            .map_or_else(|| "the patch".to_owned(), |f| f.display().to_string());
        // The lock made for this image and platform, else one for the same architecture.
        let closest = ours
            .iter()
            .find(|l| l.images.iter().any(|i| i == label))
            .or_else(|| {
                ours.iter()
                    .find(|l| l.environment.architecture == want.architecture)
            })
            .or_else(|| ours.first());
        Err(Error(match closest {
            None => format!(
                "{label}: --locked, and {folder} holds no lock of patch {} (write them with runner-patch lock)",
                req.patch
            ),
            Some(l) => format!(
                "{label}: --locked, and {} in {folder} was made for another environment: {}",
                l.file,
                locks::difference(&l.environment, &want).unwrap_or_default()
            ),
        }))
    }

    /// The answer to `req` (asked for `label`, `REPO:TAG PLATFORM`): from a lock file, from
    /// uv, or from an earlier identical request.
    pub async fn answer(&self, req: &Request, label: &str) -> Result<Resolution, Error> {
        let answer = match self.answer_from_locks(req, label).await {
            Ok(Some(r)) => Ok(r),
            Ok(None) => self.answer_from_uv(req).await,
            Err(e) => Err(e),
        };
        // Only `lock` reads them: other runs keep no copy of each platform's request.
        if self.mode == Mode::Fresh {
            self.asked.lock().await.push(Asked {
                label: label.to_owned(),
                request: req.clone(),
                answer: answer.clone(),
            });
        }
        answer
    }

    /// Finds uv (and the interpreter it picks) ahead of the first answer, when `patches` hold
    /// requirement lines and uv may be asked: the planner runs this beside the layer scan,
    /// whose seconds cover it. What it finds, an error included, is what the answer uses.
    pub async fn warm<'p>(&self, mut patches: impl Iterator<Item = &'p Patch>) {
        if self.mode != Mode::Locked && patches.any(has_requirement_lines) {
            self.uv.get_or_init(|| Uv::find(self.idle)).await;
        }
    }

    async fn answer_from_uv(&self, req: &Request) -> Result<Resolution, Error> {
        if let Some(a) = self.answers.lock().await.get(req) {
            return a.clone();
        }
        let uv = self
            .uv
            .get_or_init(|| Uv::find(self.idle))
            .await
            .as_ref()
            .map_err(Clone::clone)?;
        let answer = resolve(uv, req).await;
        self.answers
            .lock()
            .await
            .insert(req.clone(), answer.clone());
        answer
    }

    /// `patch` as it stands on the platform `tree` shows (asked for `label`): itself when it
    /// asks nothing resolved; else answered, with the wheels it names fetched and checked (a
    /// failure of either is the patch's refusal of the platform).
    pub async fn patch_for(&self, patch: &Patch, tree: &(dyn Tree + Sync), label: &str) -> Patch {
        let Some(request) = patch.kind().request(tree) else {
            return patch.clone();
        };
        let answer = match request {
            Ok(req) => self.answer(&req, label).await.map_err(|e| e.0),
            Err(why) => Err(why),
        };
        let resolved = patch.kind().resolved(answer);
        let _one = self.fetching.lock().await;
        match crate::inputs::fetch_all(&resolved.kind().inputs()).await {
            Ok(()) => resolved,
            Err(e) => patch.kind().resolved(Err(redact_all(&e.to_string()))),
        }
    }
}

/// A lock with nothing to install: the image already satisfies the lines.
const EMPTY_LOCK: &str = "lock-version = \"1.0\"\ncreated-by = \"uv\"\n";

/// The dry run's JSON schema version this tool reads (uv marks it a preview).
const SCHEMA: &str = "preview";

/// Whether `patch` holds requirement lines for uv to resolve (`lock` and the planner's
/// early start of uv ask this before any image is read).
pub fn has_requirement_lines(patch: &Patch) -> bool {
    patch.kind().describe().fields.contains_key("requirements")
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error(format!("cannot prepare uv's {what}: {e}"))
}

/// What `uv pip install -r` of `req.lines` would change on the platform `req` describes, and
/// the lock of what it would install.
pub async fn resolve(uv: &Uv, req: &Request) -> Result<Resolution, Error> {
    let dir = match scratch_in_memory() {
        Some(shm) => write_site(req, Some(&shm)).or_else(|_| write_site(req, None)),
        None => write_site(req, None),
    }?;
    let site = dir.path().join("site");
    let reqs = dir.path().join("requirements.txt");
    std::fs::write(&reqs, lines(&req.lines)).map_err(|e| io_error("requirements", e))?;
    let mut common = vec![
        "--python-platform".to_owned(),
        format!("{}-manylinux_{}_{}", req.arch, req.glibc.0, req.glibc.1),
        "--python-version".to_owned(),
        req.python.clone(),
        "--no-python-downloads".to_owned(),
        "--only-binary".to_owned(),
        ":all:".to_owned(),
    ];
    common.extend(uv.python_args());
    common.extend(req.index_args.iter().cloned());

    let mut args: Vec<String> = ["pip", "install", "--dry-run", "--output-format", "json"]
        .map(str::to_owned)
        .to_vec();
    args.extend(["--target".to_owned(), site.display().to_string()]);
    args.extend(common.iter().cloned());
    args.extend(["-r".to_owned(), reqs.display().to_string()]);
    let dry = uv.run(&args, Some(dir.path())).await?;
    if !dry.ok {
        return Err(Error(format!("uv: {}", text::one_line(&dry.stderr))));
    }
    let changes = changes(&dry.stdout)?;
    let mut warnings = warnings(&dry.stderr);
    let installs: Vec<(&str, &str)> = changes
        .iter()
        .filter_map(|c| Some((c.name.as_str(), c.to.as_deref()?)))
        .collect();
    if installs.is_empty() {
        return Ok(Resolution {
            lock: EMPTY_LOCK.to_owned(),
            changes,
            warnings,
            site: req.site.clone(),
            source: format!("resolved by {}", uv.short_version()),
        });
    }
    let (lock, more) = lock_of(uv, dir.path(), &installs, &req.lines, common).await?;
    warnings.extend(more);
    warnings.dedup();
    Ok(Resolution {
        lock,
        changes,
        warnings,
        site: req.site.clone(),
        source: format!("resolved by {}", uv.short_version()),
    })
}

/// A work folder holding the bare site uv is asked about: a `*.dist-info/METADATA` for each
/// distribution the image has installed, in `under` (else the temporary folder).
fn write_site(req: &Request, under: Option<&std::path::Path>) -> Result<tempfile::TempDir, Error> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("runner-patch-site.");
    let dir = match under {
        Some(d) => builder.tempdir_in(d),
        None => builder.tempdir(),
    }
    .map_err(|e| io_error("work directory", e))?;
    let site = dir.path().join("site");
    std::fs::create_dir(&site).map_err(|e| io_error("site directory", e))?;
    for (info, metadata) in &req.installed {
        if info.contains('/') || !info.ends_with(".dist-info") {
            continue;
        }
        let d = site.join(info);
        std::fs::create_dir_all(&d).map_err(|e| io_error("site directory", e))?;
        std::fs::write(d.join("METADATA"), metadata).map_err(|e| io_error("METADATA", e))?;
    }
    Ok(dir)
}

/// Where the bare site goes when nobody chose (`TMPDIR` unset): `/dev/shm`, when it is a
/// folder. The site is hundreds of folders and files that uv reads once within a second; on a
/// disk file system making them costs more than uv's whole answer (ext4 searching for free
/// inodes after large removals: 0.4 s and more for 500 distributions). When writing there
/// fails (a small `/dev/shm`), the site is written again in the temporary folder.
fn scratch_in_memory() -> Option<std::path::PathBuf> {
    if std::env::var_os("TMPDIR").is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let shm = std::path::PathBuf::from("/dev/shm");
    shm.is_dir().then_some(shm)
}

/// The PEP 751 lock of the distributions to install, pinned (`uv pip compile --no-deps`),
/// and uv's warnings.
async fn lock_of(
    uv: &Uv,
    dir: &std::path::Path,
    installs: &[(&str, &str)],
    req_lines: &[String],
    common: Vec<String>,
) -> Result<(String, Vec<String>), Error> {
    let pins = dir.join("pins.txt");
    let pinned: Vec<String> = installs
        .iter()
        .map(|(name, version)| pin(name, version, req_lines))
        .collect();
    std::fs::write(&pins, lines(&pinned)).map_err(|e| io_error("pins", e))?;
    let mut args: Vec<String> = [
        "pip",
        "compile",
        "--no-deps",
        "--format",
        "pylock.toml",
        "--no-header",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(common);
    args.push(pins.display().to_string());
    let compiled = uv.run(&args, Some(dir)).await?;
    if !compiled.ok {
        return Err(Error(format!(
            "uv could not lock what it resolved: {}",
            text::one_line(&compiled.stderr)
        )));
    }
    Ok((compiled.stdout, warnings(&compiled.stderr)))
}

fn lines(items: &[String]) -> String {
    items.iter().map(|l| format!("{l}\n")).collect()
}

/// The pin of one resolved distribution: the line itself where it names the wheel by URL,
/// else `name==version`.
fn pin(name: &str, version: &str, lines: &[String]) -> String {
    let norm = crate::patch::wheels::requires::normalize;
    let by_url = lines.iter().find(|l| {
        l.split_once('@').is_some_and(|(head, _)| {
            let n = head.split(['[', ';', ' ']).next().unwrap_or("");
            norm(n) == norm(name)
        })
    });
    match by_url {
        Some(l) => l.clone(),
        None => format!("{name}=={version}"),
    }
}

/// The dry run's changes by name: (name, version uninstalled, version installed).
fn changes(json: &str) -> Result<Vec<DistChange>, Error> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| {
        Error(format!(
            "uv's dry run printed no JSON this tool reads ({e})"
        ))
    })?;
    let schema = v
        .pointer("/schema/version")
        .and_then(|s| s.as_str())
        .unwrap_or("");
    if schema != SCHEMA {
        return Err(Error(format!(
            "uv's dry-run JSON schema is {schema:?}, this tool reads {SCHEMA:?}: use the uv version it was built for"
        )));
    }
    let mut by: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    for c in v
        .get("changes")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
    {
        let field = |k: &str| c.get(k).and_then(|x| x.as_str()).map(str::to_owned);
        let (Some(name), Some(version), Some(action)) =
            (field("name"), field("version"), field("action"))
        else {
            return Err(Error(format!(
                "uv's dry run names a change without name, version or action: {c}"
            )));
        };
        let entry = by.entry(name).or_default();
        match action.as_str() {
            "installed" => entry.1 = Some(version),
            "uninstalled" => entry.0 = Some(version),
            other => {
                return Err(Error(format!(
                    "uv's dry run names an action this tool does not know: {other:?}"
                )))
            }
        }
    }
    Ok(by
        .into_iter()
        .map(|(name, (from, to))| DistChange { name, from, to })
        .collect())
}

/// uv's `warning:` lines, credentials redacted.
fn warnings(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("warning:"))
        .map(|w| redact_all(w.trim()))
        .collect()
}

#[cfg(test)]
mod tests;
