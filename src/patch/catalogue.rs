//! The patch catalogue: the patches built in from `patches/`, the folders of `--patches-dir`,
//! and patch folders named by path with `--patch ./my-fix`.

use std::path::Path;

use crate::patch::error::{Error, ErrorKind};
use crate::patch::kind::Patch;
use crate::patch::kinds::{load, load_folder};
use crate::patch::shapes::{PatchSpec, ShapesPatch};

include!(concat!(env!("OUT_DIR"), "/builtin_patches.rs"));

/// Loads every patch compiled into the binary, of any kind.
pub fn builtin() -> Result<Vec<Patch>, Error> {
    BUILTIN
        .iter()
        .map(|(folder, text)| {
            let p = load(text, &format!("patches/{folder}/patch.toml"), None)?;
            if p.meta().id != *folder {
                return Err(Error::new(
                    ErrorKind::Invalid,
                    format!(
                        "patches/{folder}/patch.toml: id {:?} differs from its folder",
                        p.meta().id
                    ),
                ));
            }
            Ok(p)
        })
        .collect()
}

/// Loads every `<dir>/<id>/patch.toml`, of any kind, for patches not built in.
pub fn from_dir(dir: &Path) -> Result<Vec<Patch>, Error> {
    let rd = std::fs::read_dir(dir).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot read patches folder {}: {e}", dir.display()),
        )
    })?;
    let mut folders: Vec<_> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("patch.toml").is_file())
        .collect();
    folders.sort();
    let patches = folders
        .iter()
        .map(|f| load_folder(f))
        .collect::<Result<Vec<_>, _>>()?;
    if patches.is_empty() {
        return Err(Error::new(
            ErrorKind::Unknown,
            format!("no <id>/patch.toml under {}", dir.display()),
        ));
    }
    Ok(patches)
}

/// Whether a `--patch` value names a folder rather than an id: it holds a path separator
/// (`./my-fix`, `/abs/fix`, `fixes/one`), as pip tells `./pkg` from `pkg`.
pub fn is_path(value: &str) -> bool {
    value.contains('/') || value.contains(std::path::MAIN_SEPARATOR)
}

/// The catalogue ids are looked up in: `--patches-dir` when given, else the built-in one.
pub fn catalogue(dir: Option<&Path>) -> Result<Vec<Patch>, Error> {
    match dir {
        Some(d) => from_dir(d),
        None => builtin(),
    }
}

/// Resolves every `--patch` value, in order (every one is loaded and validated, so a bad one
/// stops the run before anything else happens). No value: the catalogue's only patch.
pub fn resolve(values: &[String], dir: Option<&Path>) -> Result<Vec<Patch>, Error> {
    let needs_catalogue = values.is_empty() || values.iter().any(|v| !is_path(v));
    let catalogue = if needs_catalogue {
        catalogue(dir)?
    } else {
        Vec::new()
    };
    if values.is_empty() {
        return match catalogue.len() {
            1 => Ok(catalogue),
            n => Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "{n} patches are known; choose one with --patch ({})",
                    ids(&catalogue)
                ),
            )),
        };
    }
    let mut out: Vec<Patch> = Vec::new();
    for v in values {
        let p = if is_path(v) {
            load_folder(Path::new(v))?
        } else {
            catalogue
                .iter()
                .find(|p| p.meta().id == *v)
                .cloned()
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Unknown,
                        format!("no patch with id {v:?} (known: {})", ids(&catalogue)),
                    )
                })?
        };
        if let Some(first) = out.iter().find(|o| o.meta().id == p.meta().id) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "--patch {v}: id {:?} is also the id of {}; ids must be unique",
                    p.meta().id,
                    first.meta().origin
                ),
            ));
        }
        out.push(p);
    }
    Ok(out)
}

/// The digest map's `patch` field for a run: the ids applied, in order, comma-separated (one
/// id for one patch, as before stacking).
pub fn map_name(patches: &[Patch]) -> String {
    patches
        .iter()
        .map(|p| p.meta().id.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The one `shapes` patch a file-level command (`patch-file`) applies, of the patches named.
pub fn one_shapes(mut patches: Vec<Patch>) -> Result<PatchSpec, Error> {
    if patches.len() > 1 {
        return Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "{} patches named: patch-file applies one shapes patch (patch-dir stacks several)",
                patches.len()
            ),
        ));
    }
    let p = patches
        .pop()
        .ok_or_else(|| Error::new(ErrorKind::Unknown, "no patch".to_owned()))?;
    match p.downcast::<ShapesPatch>() {
        Some(s) => Ok(s.spec.clone()),
        None => Err(Error::new(
            ErrorKind::Invalid,
            format!(
                "patch {} ({}) is of kind {}: patch-file takes shapes patches; try patch-dir",
                p.meta().id,
                p.meta().origin,
                p.meta().kind,
            ),
        )),
    }
}

fn ids(patches: &[Patch]) -> String {
    patches
        .iter()
        .map(|p| p.meta().id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(dir: &Path, name: &str, toml: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let f = dir.join(name);
        std::fs::create_dir_all(&f).expect("mkdir");
        std::fs::write(f.join("patch.toml"), toml).expect("write");
        for (n, c) in files {
            std::fs::write(f.join(n), c).expect("write");
        }
        f
    }

    const DIFF: &str = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n";

    #[test]
    fn no_value_is_the_builtin_patch_and_ids_resolve() {
        let p = resolve(&[], None).expect("default");
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].meta().id, "multiconnector-observe");
        assert_eq!(p[0].meta().kind, "shapes");
        let e = resolve(&["nope".into()], None)
            .expect_err("unknown id")
            .to_string();
        assert!(e.contains("no patch with id \"nope\""), "{e}");
    }

    #[test]
    fn a_value_with_a_separator_is_a_folder() {
        let tmp = tempfile::tempdir().expect("tmp");
        let f = folder(
            tmp.path(),
            "my-fix",
            "id = \"my-fix\"\nkind = \"diff\"\ntitle = \"t\"\npackage = \"vllm\"\ndiff = \"fix.patch\"\n",
            &[("fix.patch", DIFF)],
        );
        assert!(is_path("./my-fix") && is_path("/abs/fix") && !is_path("my-fix"));
        let value = f.display().to_string();
        let p = resolve(&[value.clone(), "multiconnector-observe".into()], None).expect("two");
        assert_eq!(p[0].meta().id, "my-fix");
        assert_eq!(p[1].meta().id, "multiconnector-observe");
        let e = resolve(&[value.clone(), value], None)
            .expect_err("twice")
            .to_string();
        assert!(e.contains("ids must be unique"), "{e}");
    }

    #[test]
    fn bad_folders_name_file_and_line() {
        let tmp = tempfile::tempdir().expect("tmp");
        let head = "id = \"f\"\nkind = \"diff\"\ntitle = \"t\"\npackage = \"vllm\"\n";
        type Case<'a> = (String, Vec<(&'a str, &'a str)>, String);
        let cases: Vec<Case> = vec![
            (
                format!("{head}diff = \"missing.patch\"\n"),
                vec![],
                "patch.toml:5: cannot read diff".into(),
            ),
            (
                format!("{head}diff = \"fix.patch\"\n"),
                vec![(
                    "fix.patch",
                    "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,2 +1 @@\n-a\n",
                )],
                "fix.patch:3: hunk ends early".into(),
            ),
            (
                format!("{head}diff = \"fix.patch\"\n"),
                vec![(
                    "fix.patch",
                    "--- a/other/x.py\n+++ b/other/x.py\n@@ -1 +1 @@\n-a\n+b\n",
                )],
                "fix.patch:1: other/x.py is not under vllm/".into(),
            ),
            (
                format!("{head}diff = \"fix.patch\"\naffected = \">=x\"\n"),
                vec![("fix.patch", DIFF)],
                "patch.toml:6:".into(),
            ),
            (
                format!("{head}diff = \"fix.patch\"\nbackends = [\"tpu\"]\n"),
                vec![("fix.patch", DIFF)],
                "unknown backend \"tpu\"".into(),
            ),
            (
                "id = \"Bad Id\"\nkind = \"env\"\ntitle = \"t\"\n[env]\nunset = [\"A\"]\n".into(),
                vec![],
                "patch.toml:1: id \"Bad Id\"".into(),
            ),
        ];
        for (i, (toml, files, want)) in cases.into_iter().enumerate() {
            let f = folder(tmp.path(), &format!("case{i}"), &toml, &files);
            let e = load_folder(&f).expect_err(&toml);
            let e = e.to_string();
            assert!(e.contains(&want), "case {i}: {e}");
            assert!(
                e.contains(&f.display().to_string()),
                "case {i} names its folder: {e}"
            );
        }
    }
}
