//! The patch catalogue: the specs built in from `patches/`, or read from a folder at run time.

use std::path::Path;

use crate::patch::PatchSpec;

include!(concat!(env!("OUT_DIR"), "/builtin_patches.rs"));

/// Loads the specs compiled into the binary.
pub fn builtin() -> Result<Vec<PatchSpec>, String> {
    let specs = BUILTIN
        .iter()
        .map(|(folder, text)| {
            let spec = PatchSpec::parse(text, &format!("patches/{folder}/patch.toml"))?;
            if spec.id != *folder {
                return Err(format!(
                    "patches/{folder}/patch.toml: id {:?} differs from its folder",
                    spec.id
                ));
            }
            Ok(spec)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(specs)
}

/// Loads every `<dir>/<id>/patch.toml`, for patches not built in.
pub fn from_dir(dir: &Path) -> Result<Vec<PatchSpec>, String> {
    let mut specs = Vec::new();
    let rd = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read patches folder {}: {e}", dir.display()))?;
    let mut paths: Vec<_> = rd
        .filter_map(Result::ok)
        .map(|e| e.path().join("patch.toml"))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    for p in paths {
        let text =
            std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        specs.push(PatchSpec::parse(&text, &p.display().to_string())?);
    }
    if specs.is_empty() {
        return Err(format!("no <id>/patch.toml under {}", dir.display()));
    }
    Ok(specs)
}

/// Picks one patch by id, or the only one when no id is given.
pub fn select(specs: Vec<PatchSpec>, id: Option<&str>) -> Result<PatchSpec, String> {
    match id {
        Some(id) => {
            let ids: Vec<String> = specs.iter().map(|s| s.id.clone()).collect();
            specs
                .into_iter()
                .find(|s| s.id == id)
                .ok_or_else(|| format!("no patch with id {id:?} (known: {})", ids.join(", ")))
        }
        None => {
            if specs.len() == 1 {
                specs
                    .into_iter()
                    .next()
                    .ok_or_else(|| "no patches".to_owned())
            } else {
                Err(format!(
                    "{} patches are known; choose one with --patch ({})",
                    specs.len(),
                    specs
                        .iter()
                        .map(|s| s.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
    }
}
