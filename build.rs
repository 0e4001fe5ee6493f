//! Embeds every `patches/<id>/patch.toml` in the binary, so adding a patch is adding a folder.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
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
