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
    one_malloc_arena();
    let cli = cli::Cli::parse();
    cmd::run(cli)
}

/// Keeps glibc's allocator to one arena. By default each thread that allocates gets an arena of
/// its own (up to eight per core), and memory freed in one is not reused by another: the layer
/// scans, each on a blocking thread, and the runtime's workers left a run on the bench image
/// (500 distributions) at 81-97 MiB peak RSS for about 45 MiB of live heap, 61-68 MiB with one
/// arena, at the same speed (their allocations are few; the inflate allocates nothing per
/// byte). `MALLOC_ARENA_MAX` would do the same but must be set before the process starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn one_malloc_arena() {
    // SAFETY: mallopt only changes an allocator parameter and is called first in `main`, before
    // any other thread exists or the parameter is read; its failure (0) leaves the default.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn one_malloc_arena() {}
