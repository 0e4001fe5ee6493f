//! The patch engine behind one interface ([`PatchKind`]): a patch of any kind looks at what an
//! image shows (a [`Tree`]: visible files by path, the config) and returns one [`Verdict`]:
//! already patched, not affected, refused with a reason, or patched with the list of file
//! writes and whiteouts (and, for `env`, the edited config) to append. Scan, layer, push and
//! digest-map code only ever see that list.
//!
//! The vocabulary lives in leaf files every kind uses: [`outcome`], [`verdict`], [`tree`],
//! [`meta`], [`error`]; [`kind`] holds the interface, [`kinds`] the table of kinds and
//! loading, [`catalogue`] the built-in patches and `--patch` resolution. Kinds: [`shapes`]
//! (block find/replace, the built-in fix), [`diff`] (a unified diff relative to a Python
//! package's root, or to an absolute directory), [`env`] (the config's `Env`), [`files`] (whole
//! files placed at absolute paths, paths deleted). [`dir`] is an unpacked folder as a tree.

pub mod bytecode;
pub mod catalogue;
pub mod diff;
pub mod dir;
pub mod dist;
pub mod env;
pub mod error;
pub mod files;
pub mod kind;
pub mod kinds;
pub mod meta;
pub mod outcome;
pub mod request;
pub mod shapes;
pub mod source;
pub mod tree;
pub mod verdict;
pub mod wheels;

pub use dist::{Dist, Input, InstalledWheel};
pub use error::{Error, ErrorKind};
pub use kind::{Description, Patch, PatchKind};
pub use kinds::{load, load_folder};
pub use meta::Meta;
pub use outcome::Outcome;
pub use request::{DistChange, Request, Resolution};
pub use tree::{Layered, Tree};
pub use verdict::{About, Change, Checked, Opener, Seen, Streamed, Verdict};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_kind_and_bad_toml_name_file_and_line() {
        let e = load(
            "id = \"x\"\ntitle = \"t\"\nkind = \"sed\"\n",
            "f/patch.toml",
            None,
        )
        .expect_err("unknown kind")
        .to_string();
        assert!(e.starts_with("f/patch.toml:3: unknown kind \"sed\""), "{e}");
        let e = load("id = \"x\"\ntitle = \n", "f/patch.toml", None)
            .expect_err("bad toml")
            .to_string();
        assert!(e.starts_with("f/patch.toml:2: "), "{e}");
    }

    #[test]
    fn selection_defaults_to_all() {
        let p = load(
            "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\nbackends = [\"cuda\"]\n[env]\nset = { A = \"1\" }\n",
            "e/patch.toml",
            None,
        )
        .expect("loads");
        assert_eq!(p.meta().kind, "env");
        assert!(p.meta().selects("vllm", "cuda"));
        assert!(p.meta().selects("sglang", "cuda"));
        assert!(!p.meta().selects("vllm", "rocm"));
    }
}
