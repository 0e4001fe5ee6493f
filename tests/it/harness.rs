//! Test harness: a throw-away registry process, fixture seeding, the CLI, and the independent
//! clients (skopeo, umoci, GNU tar) used to check what the tool pushed.
//!
//! The Python tools (fixtures, test support) are modules of the repository run with `python3 -m`
//! from its root (see `python`), so that they import the shared `imagekit` package as such.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const REPO: &str = "gpustack/runner";

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `python3 -m MODULE` (e.g. `fixtures.build`, `tests.support.provenance`) from the repository
/// root, where the module finds `imagekit` and its sibling modules as packages.
pub fn python(module: &str) -> Command {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", module]).current_dir(root());
    cmd
}

fn need(bin: &str) {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bin}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(ok, "{bin} is not installed: run .ci/run (or apt-get install docker-registry skopeo umoci) first");
}

/// A distribution registry on 127.0.0.1 with its own storage, killed on drop.
pub struct Registry {
    pub dir: tempfile::TempDir,
    pub addr: String,
    child: Child,
}

fn config_yaml(storage: &Path, addr: &str, auth: Option<&str>) -> String {
    format!(
        "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n{}",
        storage.display(),
        auth.unwrap_or("")
    )
}

impl Registry {
    pub fn start() -> Self {
        need("docker-registry");
        let dir = tempfile::tempdir().expect("tempdir");
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = Self::spawn(dir.path(), &addr, None);
        let reg = Registry { dir, addr, child };
        reg.wait_up();
        reg
    }

    fn spawn(dir: &Path, addr: &str, auth: Option<&str>) -> Child {
        std::fs::write(
            dir.join("config.yml"),
            config_yaml(&dir.join("storage"), addr, auth),
        )
        .expect("write config");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("registry.log"))
            .expect("log");
        Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn docker-registry")
    }

    fn wait_up(&self) {
        let start = Instant::now();
        while !matches!(http_status(&self.addr, "/v2/"), Some(200 | 401)) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "registry did not come up: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Restarts on the same port and storage with an `auth:` section (None: open again).
    pub fn restart(&mut self, auth: Option<&str>) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(self.dir.path(), &self.addr, auth);
        self.wait_up();
    }

    pub fn repo(&self) -> String {
        format!("{}/{REPO}", self.addr)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Every file in the registry's storage with its size: equal snapshots mean nothing was written.
    pub fn storage(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        let base = self.dir.path().join("storage");
        let mut stack = vec![base.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                    out.insert(
                        p.strip_prefix(&base).expect("prefix").display().to_string(),
                        len,
                    );
                }
            }
        }
        out
    }

    /// Builds and pushes fixture images; returns the fixture summary.
    pub fn seed(&self, only: &[&str]) -> Value {
        let summary = self
            .dir
            .path()
            .join(format!("summary-{}.json", only.join(",")));
        let out = python("fixtures.build")
            .args([
                "--registry",
                &self.addr,
                "--repository",
                REPO,
                "--only",
                &only.join(","),
                "--summary",
            ])
            .arg(&summary)
            .output()
            .expect("run fixtures.build");
        assert!(
            out.status.success(),
            "fixture build failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&std::fs::read(&summary).expect("summary")).expect("summary json")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_status(addr: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    buf.split_whitespace().nth(1)?.parse().ok()
}

/// The result of one CLI run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

impl From<Output> for Run {
    fn from(out: Output) -> Self {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// A run measured by `/usr/bin/time`: how long it took and its peak resident memory.
pub struct Measured {
    pub run: Run,
    pub took: Duration,
    pub rss_kib: u64,
}

/// The one way tests run runner-patch, so every run gets the same isolation: by default the
/// tool sees its own Docker config and scan cache under the work folder (`cwd`) and nothing
/// of the caller's registry, `RUNNER_PATCH_*` or `GITHUB_*` settings; `bare` gives it an
/// empty environment instead. Arguments and environment are added in the order given.
#[derive(Clone)]
pub struct Tool {
    bin: OsString,
    via: Vec<OsString>,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
    bare: bool,
}

/// The command line, for failure messages.
impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "runner-patch {:?}", self.args)
    }
}

impl Tool {
    /// The built binary with `command` as its first argument (a subcommand, or `--version`).
    pub fn new(command: &str) -> Self {
        Tool {
            bin: env!("CARGO_BIN_EXE_runner-patch").into(),
            via: Vec::new(),
            args: vec![command.into()],
            env: Vec::new(),
            cwd: None,
            bare: false,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    // The tool's own flags, so tests read as the command line they run.

    fn flag(self, flag: &str, value: impl AsRef<OsStr>) -> Self {
        self.arg(flag).arg(value)
    }

    pub fn backend(self, backend: &str) -> Self {
        self.flag("--backend", backend)
    }

    pub fn repo(self, repository: impl AsRef<OsStr>) -> Self {
        self.flag("--repository", repository)
    }

    pub fn target_repo(self, repository: impl AsRef<OsStr>) -> Self {
        self.flag("--target-repository", repository)
    }

    pub fn tag(self, tag: &str) -> Self {
        self.flag("--tag", tag)
    }

    pub fn tags<I: IntoIterator<Item = S>, S: AsRef<str>>(self, tags: I) -> Self {
        tags.into_iter().fold(self, |t, tag| t.tag(tag.as_ref()))
    }

    pub fn patch(self, patch: impl AsRef<OsStr>) -> Self {
        self.flag("--patch", patch)
    }

    /// `--manifest PATH`: where apply writes, and verify and rollback read, the digest map.
    pub fn digest_map(self, path: impl AsRef<OsStr>) -> Self {
        self.flag("--manifest", path)
    }

    pub fn json(self) -> Self {
        self.arg("--json")
    }

    /// The work folder: the run's current directory, holding its Docker config and scan cache.
    pub fn cwd(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    pub fn envs<I, K, V>(self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        vars.into_iter().fold(self, |t, (k, v)| t.env(k, v))
    }

    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Another build of the tool (the `make dist` binary, or a path inside a chroot).
    pub fn bin(mut self, path: impl AsRef<OsStr>) -> Self {
        self.bin = path.as_ref().to_owned();
        self
    }

    /// An empty environment (`env -i`): only what `env` adds, no isolation folders.
    pub fn bare(mut self) -> Self {
        self.bare = true;
        self
    }

    /// Runs the tool through `program` (e.g. `chroot ROOT`): `program args... BIN ARGS...`.
    pub fn via<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(
        mut self,
        program: impl AsRef<OsStr>,
        args: I,
    ) -> Self {
        self.via = std::iter::once(program.as_ref().to_owned())
            .chain(args.into_iter().map(|a| a.as_ref().to_owned()))
            .collect();
        self
    }

    fn command_under(&self, prefix: &[OsString]) -> Command {
        let line: Vec<&OsString> = prefix
            .iter()
            .chain(&self.via)
            .chain(std::iter::once(&self.bin))
            .chain(&self.args)
            .collect();
        let mut cmd = Command::new(line[0]);
        cmd.args(&line[1..]).stdin(Stdio::null());
        if self.bare {
            cmd.env_clear();
        } else {
            let cwd = self
                .cwd
                .as_ref()
                .unwrap_or_else(|| panic!("{self:?}: give it a work folder (.cwd) or .bare()"));
            for (key, _) in std::env::vars_os() {
                let k = key.to_string_lossy();
                if k.starts_with("RUNNER_PATCH_")
                    || k.starts_with("GITHUB_")
                    || k == "REGISTRY_AUTH_FILE"
                {
                    cmd.env_remove(&key);
                }
            }
            cmd.env("DOCKER_CONFIG", cwd.join(".no-docker-config"))
                // Each work folder has its own scan cache: no test sees another's (or the user's).
                .env("XDG_CACHE_HOME", cwd.join(".cache"));
        }
        for (key, value) in &self.env {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        if let Some(cwd) = &self.cwd {
            cmd.current_dir(cwd);
        }
        cmd
    }

    /// The configured command, to spawn in the background (stdin is closed).
    pub fn command(&self) -> Command {
        self.command_under(&[])
    }

    /// Runs to the end; `Err` only when the program could not be started.
    pub fn try_run(&self) -> std::io::Result<Run> {
        self.command().output().map(Run::from)
    }

    pub fn run(&self) -> Run {
        self.try_run().unwrap_or_else(|e| panic!("{self:?}: {e}"))
    }

    /// Runs and asserts exit 0 (naming the command and both outputs otherwise); returns stdout.
    pub fn ok(&self) -> String {
        let run = self.run();
        assert_eq!(
            run.code, 0,
            "{self:?}\nstdout: {}\nstderr: {}",
            run.stdout, run.stderr
        );
        run.stdout
    }

    /// `ok`, with stdout parsed as JSON.
    pub fn ok_json(&self) -> Value {
        let stdout = self.ok();
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{self:?}: stdout is not JSON ({e}): {stdout}"))
    }

    /// Runs under `/usr/bin/time` (peak RSS), killed with a failure if it outlives `limit`.
    pub fn measured(&self, limit: Duration) -> Measured {
        let dir = tempfile::tempdir().expect("tmp");
        let rss_file = dir.path().join("rss");
        let prefix: Vec<OsString> = vec![
            "/usr/bin/time".into(),
            "-f".into(),
            "%M".into(),
            "-o".into(),
            rss_file.clone().into(),
        ];
        let started = Instant::now();
        let mut child = self
            .command_under(&prefix)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("/usr/bin/time (apt-get install time)");
        // Drain both pipes on threads so a chatty run cannot block on a full pipe.
        let mut out = child.stdout.take().expect("stdout");
        let mut err = child.stderr.take().expect("stderr");
        let t_out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let t_err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{self:?} still running after {limit:?} (its bound)");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let took = started.elapsed();
        let rss_kib = std::fs::read_to_string(&rss_file)
            .ok()
            .and_then(|s| s.lines().last().and_then(|l| l.trim().parse().ok()))
            .expect("max RSS from /usr/bin/time");
        eprintln!(
            "runner-patch {:?}: exit {:?} in {:.1} s, max RSS {rss_kib} KiB",
            self.args.first().unwrap_or(&OsString::new()),
            status.code(),
            took.as_secs_f64(),
        );
        Measured {
            run: Run {
                code: status.code().unwrap_or(-1),
                stdout: t_out.join().expect("stdout thread"),
                stderr: t_err.join().expect("stderr thread"),
            },
            took,
            rss_kib,
        }
    }
}

/// Runs an outside tool (skopeo, umoci, ...) and returns its stdout; fails the test if it fails.
pub fn run_tool(bin: &str, args: &[&str]) -> Vec<u8> {
    need(bin);
    let out = Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e}"));
    assert!(
        out.status.success(),
        "{bin} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The raw manifest the registry serves, as skopeo (not this tool) reads it.
pub fn skopeo_raw(reference: &str) -> Vec<u8> {
    run_tool(
        "skopeo",
        &[
            "inspect",
            "--raw",
            "--tls-verify=false",
            &format!("docker://{reference}"),
        ],
    )
}

/// The raw config blob of a single-platform reference, as skopeo reads it.
pub fn skopeo_config(reference: &str) -> Value {
    let raw = run_tool(
        "skopeo",
        &[
            "inspect",
            "--config",
            "--raw",
            "--tls-verify=false",
            &format!("docker://{reference}"),
        ],
    );
    serde_json::from_slice(&raw).expect("config json")
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// Copies one platform into an OCI layout with skopeo and unpacks it with umoci (which checks
/// every layer's diff_id); returns the rootfs path and the layout path.
pub fn unpack(reference: &str, arch: &str, into: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(into).expect("mkdir");
    let layout = into.join(format!("layout-{arch}"));
    let bundle = into.join(format!("bundle-{arch}"));
    run_tool(
        "skopeo",
        &[
            "copy",
            "-q",
            "--src-tls-verify=false",
            "--override-os",
            "linux",
            "--override-arch",
            arch,
            &format!("docker://{reference}"),
            &format!("oci:{}:t", layout.display()),
        ],
    );
    run_tool(
        "umoci",
        &[
            "unpack",
            "--rootless",
            "--image",
            &format!("{}:t", layout.display()),
            &bundle.display().to_string(),
        ],
    );
    (bundle.join("rootfs"), layout)
}

/// GNU tar's listing of a gzip layer blob (fails the test if tar rejects the archive).
pub fn tar_list(blob: &Path) -> String {
    need("tar");
    let out = Command::new("tar")
        .arg("-tvzf")
        .arg(blob)
        .output()
        .expect("tar");
    assert!(
        out.status.success(),
        "GNU tar rejects {}: {}",
        blob.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Adds a tag for an existing image, digests preserved (skopeo, not this tool).
pub fn retag(reg: &Registry, from: &str, to: &str) {
    run_tool(
        "skopeo",
        &[
            "copy",
            "-q",
            "--all",
            "--preserve-digests",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            &format!("docker://{}:{from}", reg.repo()),
            &format!("docker://{}:{to}", reg.repo()),
        ],
    );
}

/// The digest a tag serves, as skopeo reads it.
pub fn served(reference: &str) -> String {
    sha256_hex(&skopeo_raw(reference))
}

/// Makes an altered copy of a patched tag with `fixtures/alter.py`; returns its JSON line.
pub fn alter(reg: &Registry, tag: &str, how: &str, out_tag: &str) -> Value {
    let out = python("fixtures.alter")
        .args([
            "--registry",
            &reg.addr,
            "--repository",
            REPO,
            "--tag",
            tag,
            "--how",
            how,
            "--out-tag",
            out_tag,
        ])
        .output()
        .expect("run fixtures.alter");
    assert!(
        out.status.success(),
        "alter.py {how} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("alter.py json")
}

/// A daemon from `tests/support` (token server, fault proxy), named by its module there
/// (`fault_proxy`): started, its one JSON ready-line read, killed on drop.
pub struct Daemon {
    child: Child,
    pub ready: Value,
}

impl Daemon {
    pub fn start(module: &str, args: &[&str]) -> Self {
        use std::io::BufRead;
        let mut child = python(&format!("tests.support.{module}"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{module}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("ready line");
        let ready = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{module} ready-line {line:?}: {e}"));
        Daemon { child, ready }
    }

    pub fn addr(&self) -> String {
        self.ready["addr"].as_str().expect("addr").to_owned()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small tmpfs mounted at `dir` (a folder made here), unmounted when dropped; `None` where
/// mounting is not allowed (not root), for the test to say SKIPPED.
pub fn small_tmpfs(dir: &Path, size: &str) -> Option<Unmount> {
    std::fs::create_dir_all(dir).expect("mkdir");
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|st| st.success())
        .then(|| Unmount(dir.to_path_buf()))
}

/// Unmounts its folder when dropped.
pub struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}
