//! Command-line interface: clap definitions only. Validation into settings happens in `cmd`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const APPLY_EXAMPLES: &str = "Examples:
  # Patch two CUDA tags in place on Docker Hub (the patched image takes over each tag)
  runner-patch apply --backend cuda --tag cuda12.9-vllm0.27.1 --tag cuda13.0-vllm0.27.1

  # Patch every affected ROCm tag, publishing under a new tag name and keeping the originals
  runner-patch apply --backend rocm --tag-suffix -patched

  # See what would happen, push nothing
  runner-patch apply --backend cann --dry-run

  # Against a local registry (loopback registries are spoken to over plain HTTP)
  runner-patch apply --backend cuda --repository 127.0.0.1:5000/gpustack/runner --tag cuda12.9-vllm0.27.1";

/// Patch released GPUStack runner images at the registry: one small appended layer per platform,
/// every existing layer reused, and a digest map from original to patched images.
#[derive(Debug, Parser)]
#[command(name = "runner-patch", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// More log output on stderr (-v: debug, -vv: trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Use patch specs from this folder (<dir>/<id>/patch.toml) instead of the built-in ones.
    #[arg(long, global = true, value_name = "DIR")]
    pub patches_dir: Option<PathBuf>,
    /// Which patch to use when more than one is known.
    #[arg(long, global = true, value_name = "ID")]
    pub patch: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Patch every platform of the given tags and push the results.
    #[command(after_help = APPLY_EXAMPLES)]
    Apply(ApplyArgs),
    /// Apply the patch to one local file (for checking a file by hand or in tests).
    #[command(
        name = "patch-file",
        after_help = "Examples:\n  runner-patch patch-file multi_connector.py --output patched.py\n  runner-patch patch-file multi_connector.py --json"
    )]
    PatchFile(PatchFileArgs),
    /// List the known patches.
    #[command(after_help = "Examples:\n  runner-patch patches\n  runner-patch patches --json")]
    Patches(PatchesArgs),
}

/// The runner image backends; each names the prefix of its tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    Cuda,
    Rocm,
    Cann,
}

impl Backend {
    pub fn prefix(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Rocm => "rocm",
            Backend::Cann => "cann",
        }
    }
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Backend whose tags are patched.
    #[arg(long, value_enum)]
    pub backend: Backend,
    /// Source repository (Docker conventions: `gpustack/runner` is on docker.io).
    #[arg(long, value_name = "REPO", default_value = "docker.io/gpustack/runner")]
    pub repository: String,
    /// A tag of that backend to patch; repeat for more. Without it, every affected tag is found.
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// With tag discovery, include `-dev` pre-release tags.
    #[arg(long)]
    pub include_dev: bool,
    /// Where patched images go (default: the source repository).
    #[arg(long, value_name = "REPO")]
    pub target_repository: Option<String>,
    /// Appended to each tag for the patched image (default: none, the patched image takes over).
    #[arg(long, value_name = "S", default_value = "", allow_hyphen_values = true)]
    pub tag_suffix: String,
    /// Where the digest map is written.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "runner-patch-manifest.json"
    )]
    pub manifest: PathBuf,
    /// Compute and report everything, push nothing, write no digest map.
    #[arg(long)]
    pub dry_run: bool,
    /// Overwrite a tag even if it moved since it was read.
    #[arg(long)]
    pub force: bool,
    /// Tags processed at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub jobs: usize,
    /// Print the digest map as JSON on stdout instead of the summary table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PatchFileArgs {
    /// The file to patch.
    pub input: PathBuf,
    /// Where to write the patched file (only when the outcome is `patched`).
    #[arg(long, short, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PatchesArgs {
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}
