//! One `patch.toml` being loaded, as every kind's loader receives it.

use std::path::Path;

/// One `patch.toml` being loaded: its text, where it was read from, and the folder holding the
/// other files it names (`None` for built-in patches, which have no other files).
pub struct Source<'a> {
    pub text: &'a str,
    pub origin: &'a str,
    pub folder: Option<&'a Path>,
}

impl Source<'_> {
    /// The sha256 of the patch's definition: its `patch.toml` and, after it, the bytes of the
    /// files it names, for the provenance statement.
    pub fn definition_digest(&self, files: &[&[u8]]) -> String {
        let mut all = self.text.as_bytes().to_vec();
        for f in files {
            all.extend_from_slice(f);
        }
        crate::digest::sha256(&all)
    }
}
