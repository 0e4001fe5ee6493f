//! `runner-patch patch-file`: the `shapes` engine on one local file.

use anyhow::{Context, Result};
use serde_json::json;

use super::common::Status;
use crate::cli::{Global, PatchFileArgs};
use runner_patch::patch::Outcome;

pub fn run(g: &Global, a: &PatchFileArgs) -> Result<Status> {
    let spec = runner_patch::patch::catalogue::one_shapes(super::common::load_patches(g)?)?;
    let bytes =
        std::fs::read(&a.input).with_context(|| format!("cannot read {}", a.input.display()))?;
    let d = spec.decide(&bytes);
    let (shape, reason) = (d.patched.as_ref().map(|(s, _)| s), d.why(&spec.id));
    if let (Some((_, bytes)), Some(out)) = (&d.patched, &a.output) {
        std::fs::write(out, bytes).with_context(|| format!("cannot write {}", out.display()))?;
    }
    let outcome = d.outcome;
    if a.json {
        crate::output::print(
            &json!({"patch": spec.id, "file": a.input.display().to_string(), "outcome": outcome.as_str(), "shape": shape, "reason": reason}).to_string(),
        )?;
    } else {
        crate::output::print(&format!("{}: {outcome}: {reason}", a.input.display()))?;
    }
    Ok(if outcome == Outcome::Refused {
        Status::Refused
    } else {
        Status::Success
    })
}
