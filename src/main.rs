//! The `runner-patch` binary: the command line (`cli.rs`), one orchestrator per command
//! (`cmd/`), and what is shown to people (`report.rs` progress bars and logs, `summary.rs` for
//! GitHub Actions, `output.rs` stdout). The domain is the `runner_patch` library.

use clap::Parser;

mod cli;
mod cmd;
mod output;
mod report;
mod summary;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    cmd::run(cli)
}
