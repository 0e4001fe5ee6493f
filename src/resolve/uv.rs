//! uv, the only resolver: found once (`RUNNER_PATCH_UV`, else `uv` on `PATH`), its version
//! checked against the minimum whose `--output-format json` this tool reads, and run here and
//! nowhere else, as a subprocess with a time bound, its output read whole (it is small).
//! Python downloads are always off; uv's own configuration and environment apply otherwise.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::error::Error;
use super::text::one_line;

/// The oldest uv whose dry-run JSON (`pip install --dry-run --output-format json`) and
/// `pip compile --format pylock.toml` this tool reads.
pub const MIN_VERSION: (u64, u64, u64) = (0, 13, 8);

/// A located, version-checked uv.
#[derive(Debug, Clone)]
pub struct Uv {
    pub path: PathBuf,
    pub version: String,
    /// How long one uv run may take before it is stopped.
    pub limit: Duration,
    /// Seconds uv waits on a silent index (`UV_HTTP_TIMEOUT`).
    pub http_timeout: u64,
    /// The interpreter uv found once for the run (see [`Uv::find_python`]), passed to every
    /// resolving run; `None` leaves each run to find its own.
    pub python: Option<PathBuf>,
}

/// What one run printed.
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// `RUNNER_PATCH_UV` (which must name a file), else the first `uv` on `PATH`.
fn locate() -> Result<Option<PathBuf>, Error> {
    if let Some(p) = std::env::var_os("RUNNER_PATCH_UV").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(Error(format!(
                "RUNNER_PATCH_UV names {}, which is not a file",
                p.display()
            )));
        }
        return Ok(Some(p));
    }
    let Some(path) = std::env::var_os("PATH") else {
        return Ok(None);
    };
    Ok(std::env::split_paths(&path)
        .map(|d| d.join("uv"))
        .find(|p| p.is_file()))
}

/// "uv 0.13.9 (...)" -> (0, 13, 9).
fn parse_version(text: &str) -> Option<(u64, u64, u64)> {
    let v = text.split_whitespace().nth(1)?;
    let mut parts = v.split(['.', '-', '+']).map(|p| p.parse::<u64>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

impl Uv {
    /// Finds uv and checks its version; `idle` bounds each of its HTTP waits.
    pub async fn find(idle: Duration) -> Result<Uv, Error> {
        let (a, b, c) = MIN_VERSION;
        let Some(path) = locate()? else {
            return Err(Error(format!(
                "uv is not installed: requirement lines are resolved by uv >= {a}.{b}.{c}; put it on PATH or name it in RUNNER_PATCH_UV"
            )));
        };
        let secs = idle.as_secs().max(1);
        let mut uv = Uv {
            path,
            version: String::new(),
            limit: Duration::from_secs(30),
            http_timeout: secs,
            python: None,
        };
        let out = uv.run(&["--version".to_owned()], None).await?;
        let v = out.stdout.trim().to_owned();
        match parse_version(&v) {
            Some(found) if found >= MIN_VERSION => {}
            _ => {
                return Err(Error(format!(
                    "{} says {:?}: requirement lines need uv >= {a}.{b}.{c}",
                    uv.path.display(),
                    one_line(if v.is_empty() { &out.stderr } else { &v })
                )))
            }
        }
        uv.version = v;
        uv.python = uv.find_python().await;
        // Each request may wait `idle`, and uv retries a few times; a resolution makes many.
        uv.limit = Duration::from_secs(secs * 8 + 60);
        Ok(uv)
    }

    /// The interpreter uv's own discovery picks (`uv python find`, run where the resolving
    /// runs run: a fresh folder), found once so that each resolving run is not a discovery
    /// again: uv asks every candidate it meets, and a candidate behind a version manager's
    /// shim costs a shell script each time (pyenv: about 0.3 s, three times in a
    /// `pip compile`). `None` when `UV_PYTHON` names the interpreter (uv's configuration
    /// applies as it stands) or uv finds none (each run then says so itself).
    async fn find_python(&self) -> Option<PathBuf> {
        if std::env::var_os("UV_PYTHON").is_some_and(|v| !v.is_empty()) {
            return None;
        }
        let dir = tempfile::tempdir().ok()?;
        let args = ["python", "find"].map(str::to_owned);
        let out = self.run(&args, Some(dir.path())).await.ok()?;
        let path = PathBuf::from(out.stdout.trim());
        (out.ok && path.is_absolute() && path.is_file()).then_some(path)
    }

    /// `--python PATH` when the run's interpreter was found once, else nothing.
    pub fn python_args(&self) -> Vec<String> {
        match &self.python {
            Some(p) => vec!["--python".to_owned(), p.display().to_string()],
            None => Vec::new(),
        }
    }

    /// "uv 0.13.9", for people.
    pub fn short_version(&self) -> String {
        self.version.split(" (").next().unwrap_or("uv").to_owned()
    }

    /// Runs uv with `args` in `dir`; stopped (and killed) past the time limit.
    pub async fn run(&self, args: &[String], dir: Option<&Path>) -> Result<Output, Error> {
        let mut cmd = tokio::process::Command::new(&self.path);
        cmd.args(args)
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env("UV_HTTP_TIMEOUT", self.http_timeout.to_string())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(d) = dir {
            cmd.current_dir(d);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Error(format!("cannot run {}: {e}", self.path.display())))?;
        let (mut out, mut err) = (String::new(), String::new());
        let mut so = child.stdout.take();
        let mut se = child.stderr.take();
        let read = async {
            let (a, b) = tokio::join!(
                async {
                    if let Some(s) = so.as_mut() {
                        let _ = s.read_to_string(&mut out).await;
                    }
                },
                async {
                    if let Some(s) = se.as_mut() {
                        let _ = s.read_to_string(&mut err).await;
                    }
                }
            );
            let _ = (a, b);
            child.wait().await
        };
        let status = match tokio::time::timeout(self.limit, read).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Error(format!("uv did not finish: {e}"))),
            Err(_) => {
                return Err(Error(format!(
                    "uv gave no answer within {} s (an index that does not answer?); stopped",
                    self.limit.as_secs()
                )))
            }
        };
        Ok(Output {
            ok: status.success(),
            stdout: out,
            stderr: err,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_uv_prints_them() {
        assert_eq!(
            parse_version("uv 0.13.9 (x86_64-unknown-linux-gnu)"),
            Some((0, 13, 9))
        );
        assert_eq!(parse_version("uv 0.14.0"), Some((0, 14, 0)));
        assert_eq!(parse_version("uv 1.2"), Some((1, 2, 0)));
        assert_eq!(parse_version("nonsense"), None);
        assert!(parse_version("uv 0.13.7").unwrap() < MIN_VERSION);
    }
}
