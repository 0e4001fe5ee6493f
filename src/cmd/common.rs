//! What the commands share: exit statuses, the runtime, and loading the chosen patches.

use std::process::ExitCode;

use crate::cli::Global;

/// Exit statuses, as documented in docs/pipeline.md ("Exit status").
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

/// The registry client's settings for this run: the time bounds and `--range-parallel` of the
/// command line, the retry count of `RUNNER_PATCH_RETRIES` (N retries after the first try, 0
/// turns them off) and the range size of `RUNNER_PATCH_RANGE_SIZE` (bytes, 4 KiB to 64 MiB);
/// a value that is not a number leaves the default. Requests in flight stay at the default;
/// `apply` sizes them from `--jobs`.
pub fn registry_settings(g: &Global) -> runner_patch::registry::Settings {
    use runner_patch::registry::Ranges;
    let retry = std::env::var("RUNNER_PATCH_RETRIES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or_else(
            runner_patch::registry::Retry::default,
            runner_patch::registry::Retry::with_retries,
        );
    let size = std::env::var("RUNNER_PATCH_RANGE_SIZE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(Ranges::DEFAULT_SIZE, |n| {
            n.clamp(Ranges::MIN_SIZE, 64 << 20)
        });
    runner_patch::registry::Settings {
        limits: g.bounds.limits(),
        retry,
        ranges: Ranges {
            parallel: usize::from(g.bounds.range_parallel),
            size,
        },
        ..Default::default()
    }
}

/// A multi-threaded runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Loads the chosen patches (ids from the built-in catalogue or `--patches-dir`, or folders),
/// in the order given, every one validated and its inputs fetched before any registry is
/// touched.
pub fn load_patches(g: &Global) -> anyhow::Result<Vec<runner_patch::patch::Patch>> {
    let patches = runner_patch::patch::catalogue::resolve(&g.patch, g.patches_dir.as_deref())?;
    if patches.iter().any(|p| !p.kind().inputs().is_empty()) {
        runtime()?.block_on(runner_patch::inputs::fetch_for(&patches))?;
    }
    Ok(patches)
}
