//! Command-line interface: clap definitions only. Validation into settings happens in `cmd`;
//! the `--help` text after each command's options (what it does beyond them, and examples) is
//! prose in `src/help/<command>.txt`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use runner_patch::VERSION;

/// Patch released GPUStack runner images at the registry: one small appended layer per platform,
/// every existing layer reused, and a digest map from original to patched images.
#[derive(Debug, Parser)]
#[command(name = "runner-patch", version = VERSION, about, long_about = None)]
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
    /// A patch: an id (built in or in --patches-dir), or a path to a patch folder holding
    /// `patch.toml` (any value with a `/`, such as `./my-fix`). Repeatable: applied in the order
    /// given, one layer per file patch (default: the built-in multiconnector-observe).
    #[arg(long, global = true, value_name = "ID|PATH")]
    pub patch: Vec<String>,
    #[command(flatten)]
    pub bounds: Bounds,
}

/// Time bounds on registry traffic (docs/reliability.md, "Bounds"); each also reads an
/// environment variable.
#[derive(Debug, Args)]
#[command(next_help_heading = "Registry bounds")]
pub struct Bounds {
    /// Seconds without a byte from a registry (or its token service) before a request fails.
    #[arg(long, global = true, value_name = "SECS", env = "RUNNER_PATCH_IDLE_TIMEOUT",
          default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: u64,
    /// Seconds every request may take, plus the time its size needs at --min-rate.
    #[arg(long, global = true, value_name = "SECS", env = "RUNNER_PATCH_REQUEST_TIMEOUT",
          default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout: u64,
    /// Slowest transfer accepted, in KiB/s: it sets how much a request's deadline grows with size.
    #[arg(long, global = true, value_name = "KIB_S", env = "RUNNER_PATCH_MIN_RATE",
          default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub min_rate: u64,
    /// Seconds a docker-credential helper may take before it is stopped.
    #[arg(long, global = true, value_name = "SECS", env = "RUNNER_PATCH_HELPER_TIMEOUT",
          default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub helper_timeout: u64,
    /// Ranges of 2 MiB read at once, each its own connection, so a layer arrives at the
    /// link's speed rather than one connection's (all layers of the run share them: at most
    /// N x 2 MiB held in memory). 0 or 1: each layer is one plain stream.
    #[arg(long, global = true, value_name = "N", env = "RUNNER_PATCH_RANGE_PARALLEL",
          default_value_t = 8, value_parser = clap::value_parser!(u16).range(0..=64))]
    pub range_parallel: u16,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Patch every platform of the given tags and push the results.
    #[command(after_help = include_str!("help/apply.txt").trim_end())]
    Apply(ApplyArgs),
    /// Show what apply would do to each tag and platform; push nothing.
    #[command(after_help = include_str!("help/plan.txt").trim_end())]
    Plan(PlanArgs),
    /// Resolve a requirements patch for every selected tag and platform and write its PEP 751
    /// lock files into the patch folder; push nothing.
    #[command(after_help = include_str!("help/lock.txt").trim_end())]
    Lock(LockArgs),
    /// Check patched images independently of how they were made (exit 1 on any difference).
    #[command(after_help = include_str!("help/verify.txt").trim_end())]
    Verify(VerifyArgs),
    /// Point every tag in a digest map back at its original digest.
    #[command(after_help = include_str!("help/rollback.txt").trim_end())]
    Rollback(RollbackArgs),
    /// Join the digest maps of a sharded run (apply --shard K/N) into one.
    #[command(after_help = include_str!("help/join.txt").trim_end())]
    Join(JoinArgs),
    /// Write shell completions to stdout.
    #[command(
        after_help = include_str!("help/completions.txt").trim_end()
    )]
    Completions(CompletionsArgs),
    /// Apply the patch to one local file (for checking a file by hand or in tests).
    #[command(
        name = "patch-file",
        after_help = include_str!("help/patch-file.txt").trim_end()
    )]
    PatchFile(PatchFileArgs),
    /// Apply patches (any kind but env) to an unpacked tree in place, in the order given.
    #[command(
        name = "patch-dir",
        after_help = include_str!("help/patch-dir.txt").trim_end()
    )]
    PatchDir(PatchDirArgs),
    /// List the known patches.
    #[command(after_help = include_str!("help/patches.txt").trim_end())]
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

/// Which images: the source, the tags (or discovery), and where results go.
#[derive(Debug, Args)]
pub struct ImageArgs {
    /// Backend whose tags are patched (needed without --matrix; with it, only that backend's
    /// rules are taken).
    #[arg(long, value_enum, required_unless_present = "matrix")]
    pub backend: Option<Backend>,
    /// Source repository (Docker conventions: `gpustack/runner` is on docker.io; `docker://`
    /// may lead), or an OCI image layout directory `oci:PATH` (its tags are index.json's
    /// `org.opencontainers.image.ref.name`s).
    #[arg(long, value_name = "REPO", default_value = "docker.io/gpustack/runner")]
    pub repository: String,
    /// A tag of that backend to patch; repeat for more. Without it, every affected tag is found.
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// The runner project's matrix.yaml (a post operation's): exactly the tags its rules give,
    /// each on the platforms its rule names (--tag narrows them further).
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<std::path::PathBuf>,
    /// With tag discovery, include `-dev` pre-release tags.
    #[arg(long)]
    pub include_dev: bool,
    /// Where patched images go (default: the source repository): a registry repository, or an
    /// OCI image layout directory `oci:PATH` (created when missing).
    #[arg(long, value_name = "REPO")]
    pub target_repository: Option<String>,
    /// Appended to each tag for the patched image (default: none, the patched image takes over).
    #[arg(long, value_name = "S", default_value = "", allow_hyphen_values = true)]
    pub tag_suffix: String,
    /// Tags processed at once; also the most platform scans at once across the run, and a
    /// quarter of the registry requests in flight.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub jobs: usize,
    /// Print the digest map as JSON on stdout instead of the summary table.
    #[arg(long)]
    pub json: bool,
    /// Attach no SLSA provenance statement to the patched manifests.
    #[arg(long)]
    pub no_provenance: bool,
    /// Keep what layer scans found here, so `apply` after `plan` reads no layer again
    /// [default: $XDG_CACHE_HOME/runner-patch/scans, else ~/.cache/runner-patch/scans].
    #[arg(long, value_name = "DIR", env = "RUNNER_PATCH_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Read every layer from the registry: no scan cache is read or written.
    #[arg(long)]
    pub no_cache: bool,
    /// Only the tags of shard K of N (1-based): those whose sha256, modulo N, is K-1. The N
    /// jobs of a pipeline matrix each take one shard of the same tags, and `join` puts their
    /// digest maps together.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub images: ImageArgs,
    /// Where the digest map is written (`--manifest`, its earlier name, still works).
    #[arg(
        long = "digest-map",
        visible_alias = "manifest",
        value_name = "PATH",
        default_value = "runner-patch-manifest.json"
    )]
    pub digest_map: PathBuf,
    /// Compute and report everything, push nothing, write no digest map (same as `plan`).
    #[arg(long)]
    pub dry_run: bool,
    /// Overwrite a tag even if it moved since it was read.
    #[arg(long)]
    pub force: bool,
    /// Also write each provenance statement (and its predicate alone) here, for signing.
    #[arg(long, value_name = "DIR")]
    pub provenance_dir: Option<PathBuf>,
    /// Requirements patches install only what their lock files say (`runner-patch lock`): no
    /// index is asked to resolve; a platform without a lock made for its environment is refused.
    #[arg(long)]
    pub locked: bool,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub images: ImageArgs,
    /// As for apply: only the requirements patches' lock files, no resolution.
    #[arg(long)]
    pub locked: bool,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    #[command(flatten)]
    pub images: ImageArgs,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Images to check (`REPO:TAG` or `REPO@DIGEST`), without a digest map: structure only.
    #[arg(value_name = "REF")]
    pub references: Vec<String>,
    /// A digest map from `apply`: check every patched target against its original
    /// (`--manifest`, its earlier name, still works).
    #[arg(long = "digest-map", visible_alias = "manifest", value_name = "PATH")]
    pub digest_map: Option<PathBuf>,
    /// Skip the provenance checks (for images applied with `--no-provenance`).
    #[arg(long)]
    pub no_provenance: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The digest map written by `apply` (`--manifest`, its earlier name, still works).
    #[arg(long = "digest-map", visible_alias = "manifest", value_name = "PATH")]
    pub digest_map: PathBuf,
    /// Show what would be moved, move nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The digest maps to join (one per shard).
    #[arg(value_name = "MAP", required = true)]
    pub maps: Vec<PathBuf>,
    /// Where the joined map is written, or merged into when it exists (`--manifest`, its
    /// earlier name, still works).
    #[arg(long = "digest-map", visible_alias = "manifest", value_name = "PATH")]
    pub digest_map: PathBuf,
    /// Print the joined map as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write completions for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
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
pub struct PatchDirArgs {
    /// The tree to patch (a rootfs, or a folder holding the package).
    pub root: PathBuf,
    /// Decide and report, write nothing.
    #[arg(long)]
    pub dry_run: bool,
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

impl Bounds {
    /// The time limits these options give.
    pub fn limits(&self) -> runner_patch::registry::Limits {
        use std::time::Duration;
        runner_patch::registry::Limits {
            idle: Duration::from_secs(self.idle_timeout),
            base: Duration::from_secs(self.request_timeout),
            min_rate: self.min_rate.saturating_mul(1024),
            helper: Duration::from_secs(self.helper_timeout),
        }
    }
}
