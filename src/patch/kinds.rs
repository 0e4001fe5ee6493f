//! The kinds `patch.toml` can declare, and loading a patch of any of them. A new kind is one
//! folder implementing [`crate::patch::kind::PatchKind`] and one line in [`KINDS`].

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::patch::error::{Error, ErrorKind};
use crate::patch::kind::Patch;
use crate::patch::meta::{at_line, toml_error};
use crate::patch::source::Source;

/// A kind: its name in `patch.toml` and its loader.
pub struct KindEntry {
    pub name: &'static str,
    pub load: fn(&Source<'_>) -> Result<Patch, Error>,
}

/// Every kind, in the order error messages list them; the first is the default when
/// `patch.toml` names none.
pub const KINDS: &[KindEntry] = &[
    KindEntry {
        name: "shapes",
        load: crate::patch::shapes::load,
    },
    KindEntry {
        name: "diff",
        load: crate::patch::diff::load,
    },
    KindEntry {
        name: "env",
        load: crate::patch::env::load,
    },
    KindEntry {
        name: "files",
        load: crate::patch::files::load,
    },
    KindEntry {
        name: "wheels",
        load: crate::patch::wheels::load,
    },
];

#[derive(Deserialize)]
struct KindOnly {
    kind: Option<toml::Spanned<String>>,
}

/// Loads one `patch.toml`. Everything is validated here, so a bad patch stops the run before
/// any registry is touched.
pub fn load(text: &str, origin: &str, folder: Option<&Path>) -> Result<Patch, Error> {
    let head: KindOnly = toml::from_str(text).map_err(|e| toml_error(origin, text, &e))?;
    let name = head.kind.as_ref().map(|s| s.get_ref().as_str());
    let entry = match name {
        None => KINDS.first(),
        Some(n) => KINDS.iter().find(|k| k.name == n),
    };
    let Some(entry) = entry else {
        let names: Vec<String> = KINDS.iter().map(|k| format!("{:?}", k.name)).collect();
        let expected = match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        };
        let at = head.kind.as_ref().map_or(0, |s| s.span().start);
        let e = at_line(
            origin,
            text,
            at,
            &format!(
                "unknown kind {:?} (expected {expected})",
                name.unwrap_or_default()
            ),
        );
        return Err(Error::new(ErrorKind::Unknown, e.to_string()));
    };
    (entry.load)(&Source {
        text,
        origin,
        folder,
    })
}

/// Loads the patch folder at `dir` (`dir/patch.toml` and the files it names).
pub fn load_folder(dir: &Path) -> Result<Patch, Error> {
    let toml_path: PathBuf = dir.join("patch.toml");
    let text = std::fs::read_to_string(&toml_path).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot read {}: {e}", toml_path.display()),
        )
    })?;
    load(&text, &toml_path.display().to_string(), Some(dir))
}
