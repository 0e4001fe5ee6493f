//! The `runner-patch` binary: parse, run, map the result to an exit code.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = runner_patch::cli::Cli::parse();
    runner_patch::cmd::run(cli)
}
