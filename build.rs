//! Embeds every `patches/<id>/patch.toml` in the binary, so adding a patch is adding a folder,
//! and records the git commit the binary is built from, so `--version` names it.

use std::fmt::Write as _;
use std::path::Path;

/// The commit being built: `RUNNER_PATCH_GIT_COMMIT` when the builder sets it (a source tree
/// without `.git`, as in a container build), else `git rev-parse`, else "unknown".
fn git_commit() -> String {
    println!("cargo:rerun-if-env-changed=RUNNER_PATCH_GIT_COMMIT");
    if let Ok(c) = std::env::var("RUNNER_PATCH_GIT_COMMIT") {
        if !c.trim().is_empty() {
            return c.trim().to_owned();
        }
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    // Rebuild when HEAD moves: HEAD itself, the branch it names, and packed refs.
    let mut watch = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(branch);
    }
    for w in watch {
        // Only paths that exist: cargo reruns the script on every build for a missing one.
        if let Some(p) = git(&["rev-parse", "--git-path", &w]).filter(|p| Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
}

fn main() {
    println!("cargo:rustc-env=RUNNER_PATCH_GIT_COMMIT={}", git_commit());
    let dir = Path::new("patches");
    println!("cargo:rerun-if-changed=patches");
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("patches/ exists")
        .filter_map(Result::ok)
        .map(|e| e.path().join("patch.toml"))
        .filter(|p| p.is_file())
        .collect();
    entries.sort();
    let mut out = String::from("/// Every patch folder's spec: (folder, patch.toml text).\npub const BUILTIN: &[(&str, &str)] = &[\n");
    for p in &entries {
        println!("cargo:rerun-if-changed={}", p.display());
        let abs = std::fs::canonicalize(p).expect("patch path resolves");
        let folder = p
            .parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .expect("patch folder name is UTF-8");
        writeln!(out, "    ({folder:?}, include_str!({:?})),", abs.display())
            .expect("write to string");
    }
    out.push_str("];\n");
    let dest =
        Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR set")).join("builtin_patches.rs");
    std::fs::write(dest, out).expect("write builtin_patches.rs");
}
