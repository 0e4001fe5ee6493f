//! One orchestrator per command, and the mapping from results to exit codes:
//! 0 success, 1 something was refused (or, for checks, differs), 2 an error.

use std::process::ExitCode;

use crate::cli::{Cli, Command, Global};
use runner_patch::patch::PatchSpec;

pub mod apply;
pub mod patch_dir;
pub mod patch_file;
pub mod patches;
pub mod rollback;
pub mod verify;

/// Exit statuses, as documented in the README.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Success,
    Refused,
    Error,
}

impl From<Status> for ExitCode {
    fn from(s: Status) -> Self {
        match s {
            Status::Success => ExitCode::SUCCESS,
            Status::Refused => ExitCode::from(1),
            Status::Error => ExitCode::from(2),
        }
    }
}

fn init_logging(g: &Global) {
    crate::report::init(!g.quiet);
    let default = if g.quiet {
        "error"
    } else {
        match g.verbose {
            0 => "warn,runner_patch=info",
            1 => "info,runner_patch=debug",
            _ => "debug,runner_patch=trace",
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUNNER_PATCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let ansi = std::env::var_os("NO_COLOR").is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    // In GitHub Actions warnings go out once, as `::warning::` commands (annotations).
    let actions = crate::summary::in_actions();
    let log = tracing_subscriber::fmt::layer()
        .with_writer(crate::report::LogWriter)
        .with_ansi(ansi)
        .with_target(false)
        .without_time()
        .with_filter(tracing_subscriber::filter::filter_fn(move |m| {
            !(actions && *m.level() == tracing::Level::WARN)
        }));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(log)
        .with(actions.then_some(crate::summary::WarningCommands))
        .try_init();
}

/// A multi-threaded runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Loads the chosen patches (ids from the built-in catalogue or `--patches-dir`, or folders),
/// in the order given, every one validated before any registry is touched.
pub fn load_patches(g: &Global) -> Result<Vec<runner_patch::patch::Patch>, String> {
    let patches = runner_patch::patches::resolve(&g.patch, g.patches_dir.as_deref())?;
    if patches.is_empty() {
        return Err("no patch".to_owned());
    }
    Ok(patches)
}

/// The digest map's `patch` field for a run: the ids applied, in order, comma-separated (one
/// id for one patch, as before stacking).
pub fn map_patch_name(patches: &[runner_patch::patch::Patch]) -> String {
    patches
        .iter()
        .map(|p| p.meta().id.clone())
        .collect::<Vec<_>>()
        .join(",")
}

/// The one `shapes` patch a file-level command (`patch-file`) applies.
pub fn load_patch(g: &Global) -> Result<PatchSpec, String> {
    let mut patches = load_patches(g)?;
    if patches.len() > 1 {
        return Err(format!(
            "{} patches named: patch-file applies one shapes patch (patch-dir stacks several)",
            patches.len()
        ));
    }
    match patches.pop() {
        Some(runner_patch::patch::Patch::Shapes(s)) => Ok(s.spec),
        Some(other) => Err(format!(
            "patch {} ({}) is of kind {}: patch-file takes shapes patches; try patch-dir",
            other.meta().id,
            other.meta().origin,
            other.meta().kind.as_str(),
        )),
        None => Err("no patch".to_owned()),
    }
}

/// The registry client's settings for this run: the time bounds of the command line and the
/// retry count of `RUNNER_PATCH_RETRIES` (N retries after the first try, 0 turns them off; a
/// value that is not a number leaves the default). Requests in flight stay at the default;
/// `apply` sizes them from `--jobs`.
pub fn registry_settings(g: &Global) -> runner_patch::registry::Settings {
    let retry = std::env::var("RUNNER_PATCH_RETRIES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or_else(
            runner_patch::registry::Retry::default,
            runner_patch::registry::Retry::with_retries,
        );
    runner_patch::registry::Settings {
        limits: g.bounds.limits(),
        retry,
        ..Default::default()
    }
}

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    init_logging(&cli.global);
    let status = match &cli.command {
        Command::Apply(a) => apply::run(
            &cli.global,
            &a.images,
            apply::Mode {
                dry_run: a.dry_run,
                force: a.force,
                manifest: Some(&a.manifest),
                provenance_dir: a.provenance_dir.as_deref(),
            },
        ),
        Command::Plan(a) => apply::run(
            &cli.global,
            &a.images,
            apply::Mode {
                dry_run: true,
                force: false,
                manifest: None,
                provenance_dir: None,
            },
        ),
        Command::Verify(a) => verify::run(&cli.global, a),
        Command::Rollback(a) => rollback::run(&cli.global, a),
        Command::Completions(a) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            // Generated into memory: clap_complete panics on a write error (a closed pipe).
            let mut buf = Vec::new();
            clap_complete::generate(a.shell, &mut cmd, "runner-patch", &mut buf);
            crate::output::print(String::from_utf8_lossy(&buf).trim_end_matches('\n'))
                .map(|()| Status::Success)
        }
        Command::PatchFile(a) => patch_file::run(&cli.global, a),
        Command::PatchDir(a) => patch_dir::run(&cli.global, a),
        Command::Patches(a) => patches::run(&cli.global, a),
    };
    match status {
        Ok(s) => s.into(),
        Err(e) => {
            eprintln!("runner-patch: error: {e:#}");
            Status::Error.into()
        }
    }
}
