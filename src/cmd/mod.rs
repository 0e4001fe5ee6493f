//! One orchestrator per command, and the mapping from results to exit codes:
//! 0 success, 1 something was refused (or, for checks, differs), 2 an error.

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use common::Status;

pub mod apply;
mod common;
pub mod join;
pub mod lock;
pub mod patch_dir;
pub mod patch_file;
pub mod patches;
pub mod rollback;
pub mod verify;

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    crate::report::init_logging(cli.global.verbose, cli.global.quiet);
    let status = match &cli.command {
        Command::Apply(a) => apply::run(
            &cli.global,
            &a.images,
            apply::Mode {
                dry_run: a.dry_run,
                force: a.force,
                digest_map: Some(&a.digest_map),
                provenance_dir: a.provenance_dir.as_deref(),
                resolve: apply::resolve_mode(a.locked),
                report: true,
            },
        )
        .map(|(status, _)| status),
        Command::Plan(a) => apply::run(
            &cli.global,
            &a.images,
            apply::Mode {
                dry_run: true,
                force: false,
                digest_map: None,
                provenance_dir: None,
                resolve: apply::resolve_mode(a.locked),
                report: true,
            },
        )
        .map(|(status, _)| status),
        Command::Lock(a) => lock::run(&cli.global, a),
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
