//! One orchestrator per command, and the mapping from results to exit codes:
//! 0 success, 1 something was refused (or, for checks, differs), 2 an error.

use std::process::ExitCode;

use crate::cli::{Cli, Command, Global};
use common::Status;

pub mod apply;
mod common;
pub mod join;
pub mod patch_dir;
pub mod patch_file;
pub mod patches;
pub mod rollback;
pub mod verify;

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
                digest_map: Some(&a.digest_map),
                provenance_dir: a.provenance_dir.as_deref(),
            },
        ),
        Command::Plan(a) => apply::run(
            &cli.global,
            &a.images,
            apply::Mode {
                dry_run: true,
                force: false,
                digest_map: None,
                provenance_dir: None,
            },
        ),
        Command::Verify(a) => verify::run(&cli.global, a),
        Command::Rollback(a) => rollback::run(&cli.global, a),
        Command::Join(a) => join::run(&cli.global, a),
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
