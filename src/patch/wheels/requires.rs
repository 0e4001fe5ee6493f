//! METADATA, markers and requirement checks (pip's own and `pip check`'s).

use super::target::Target;

/// The parts of a dist's METADATA the checks use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub name: String,
    pub version: String,
    pub requires_dist: Vec<String>,
    pub requires_python: Option<String>,
}

/// Parses METADATA bytes.
pub fn parse_metadata(bytes: &[u8]) -> Result<Metadata, String> {
    let _ = bytes;
    todo!()
}

/// PEP 503 normalized name.
pub fn normalize(name: &str) -> String {
    let _ = name;
    todo!()
}

/// Whether a package marker applies to `t`.
pub fn applies(marker: Option<&str>, t: &Target) -> Result<bool, String> {
    let _ = (marker, t);
    todo!()
}

/// Whether `t`'s Python meets `requires_python`.
pub fn python_ok(requires_python: &str, t: &Target) -> Result<bool, String> {
    let _ = (requires_python, t);
    todo!()
}

/// Unmet Requires-Dist of `new` (markers evaluated for `t`, no extras) against `after` (what the
/// image has once the change is made, new ones included): one line each, naming both sides.
pub fn missing(new: &[Metadata], after: &[Metadata], t: &Target) -> Vec<String> {
    let _ = (new, after, t);
    todo!()
}

/// pip check: installed dists (in `after`, not in `new`) whose requirements `after` no longer
/// meets but `before` did. One line each, worded like pip check.
pub fn broken(
    new: &[Metadata],
    before: &[Metadata],
    after: &[Metadata],
    t: &Target,
) -> Vec<String> {
    let _ = (new, before, after, t);
    todo!()
}
