//! `runner-patch patch-file`: the patch engine on one local file.

use anyhow::{anyhow, Context, Result};
use serde_json::json;

use super::Status;
use crate::cli::{Global, PatchFileArgs};
use runner_patch::patch::Decision;

pub fn run(g: &Global, a: &PatchFileArgs) -> Result<Status> {
    let spec = super::load_patch(g).map_err(|e| anyhow!(e))?;
    let bytes =
        std::fs::read(&a.input).with_context(|| format!("cannot read {}", a.input.display()))?;
    let decision = spec.decide(&bytes);
    let (shape, reason) = match &decision {
        Decision::Patched { shape, .. } => (Some(shape.clone()), format!("shape {shape} patched")),
        Decision::AlreadyPatched => (None, format!("already carries patch {}", spec.id)),
        Decision::NotAffected { reason } | Decision::Refused { reason } => (None, reason.clone()),
    };
    if let (Decision::Patched { bytes, .. }, Some(out)) = (&decision, &a.output) {
        std::fs::write(out, bytes).with_context(|| format!("cannot write {}", out.display()))?;
    }
    let outcome = decision.outcome();
    if a.json {
        crate::output::print(
            &json!({"patch": spec.id, "file": a.input.display().to_string(), "outcome": outcome.as_str(), "shape": shape, "reason": reason}).to_string(),
        )?;
    } else {
        crate::output::print(&format!("{}: {outcome}: {reason}", a.input.display()))?;
    }
    Ok(if outcome == runner_patch::patch::Outcome::Refused {
        Status::Refused
    } else {
        Status::Success
    })
}
