//! GitHub Actions output: a Markdown summary of each command appended to the file named by
//! `GITHUB_STEP_SUMMARY`, so a reviewer sees in the job summary what `plan` found before
//! approving `apply`; and warnings as `::warning::` workflow commands when `GITHUB_ACTIONS=true`,
//! so they become annotations of the run. Outside GitHub Actions (neither variable set) nothing
//! of it is written. Workflow commands go to stderr (the runner reads both streams), so stdout
//! keeps carrying only results (`--json` stays parseable).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use serde_json::Value;

use runner_patch::digest_map::DigestMap;

/// True inside a GitHub Actions job (the runner sets `GITHUB_ACTIONS=true`).
pub fn in_actions() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// The job summary file, when the runner gave one.
fn summary_file() -> Option<PathBuf> {
    std::env::var_os("GITHUB_STEP_SUMMARY")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// Appends to the job summary; a failure to write it is a warning, never a failed run (the
/// digest map and the exit status are what a pipeline relies on).
fn append(markdown: &str) {
    let Some(path) = summary_file() else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(markdown.as_bytes()));
    if let Err(e) = written {
        tracing::warn!(
            "cannot append the job summary to {} (GITHUB_STEP_SUMMARY): {e}",
            path.display()
        );
    }
}

/// Text safe inside a Markdown table cell: no pipe splits the row, no newline ends it.
fn cell(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\r', '\n'], " ")
}

/// A code span for digests, paths and references (none of which hold backticks).
fn code(s: &str) -> String {
    format!("`{}`", s.replace('`', "'").replace('|', "\\|"))
}

fn digests(original: &str, patched: Option<&str>) -> String {
    match patched {
        Some(p) if p != original => format!("{} → {}", code(original), code(p)),
        Some(_) => format!("{} (unchanged)", code(original)),
        None => format!("{} → none", code(original)),
    }
}

/// The summary of `plan` or `apply` (`dry_run`: nothing was pushed): per tag and platform the
/// outcome, original -> patched digest, the file, bytes read and new bytes; `errors` are the
/// tags that failed, with their error.
pub fn apply(map: &DigestMap, dry_run: bool, errors: &[(String, String)]) {
    if summary_file().is_none() {
        return;
    }
    append(&apply_markdown(map, dry_run, errors));
}

/// `2 patched, 1 refused, 1 error`: the images by outcome.
fn tally(map: &DigestMap, errors: &[(String, String)]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for i in &map.images {
        match counts.iter_mut().find(|(o, _)| *o == i.outcome.as_str()) {
            Some((_, n)) => *n += 1,
            None => counts.push((i.outcome.as_str().to_owned(), 1)),
        }
    }
    if !errors.is_empty() {
        counts.push(("error".into(), errors.len()));
    }
    counts
        .iter()
        .map(|(o, n)| format!("{n} {o}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The table's rows: one per image (`all`), one per platform, one per image that failed.
fn rows(md: &mut String, map: &DigestMap, errors: &[(String, String)]) {
    let human = runner_patch::units::human;
    for i in &map.images {
        let target = if i.target != i.source {
            format!(" → {}", code(&i.target))
        } else {
            String::new()
        };
        let read: u64 = i.platforms.iter().map(|p| p.bytes_scanned).sum();
        let _ = writeln!(
            md,
            "| {}{target} | all | {} | {} |  |  | {} | {} |",
            code(&i.source),
            cell(i.outcome.as_str()),
            digests(&i.original_digest, i.patched_digest.as_deref()),
            human(read),
            human(i.bytes_to_push),
        );
        for p in &i.platforms {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                code(&i.source),
                cell(&p.platform),
                cell(p.outcome.as_str()),
                digests(&p.original_digest, p.patched_digest.as_deref()),
                p.file.as_deref().map(code).unwrap_or_default(),
                cell(p.vllm_version.as_deref().unwrap_or("?")),
                human(p.bytes_scanned),
                human(p.bytes_to_push),
            );
        }
    }
    for (image, _) in errors {
        let _ = writeln!(md, "| {} | all | error |  |  |  |  |  |", code(image));
    }
}

/// Why each refused platform and each failed image stopped.
fn reasons(map: &DigestMap, errors: &[(String, String)]) -> Vec<String> {
    map.images
        .iter()
        .flat_map(|i| {
            i.platforms
                .iter()
                .filter(|p| p.outcome == runner_patch::patch::Outcome::Refused)
                .map(move |p| {
                    format!(
                        "- {} {}: {}",
                        code(&i.source),
                        cell(&p.platform),
                        cell(&p.reason)
                    )
                })
        })
        .chain(
            errors
                .iter()
                .map(|(image, e)| format!("- {}: {}", code(image), cell(e))),
        )
        .collect()
}

/// What each platform's patches may break (`warnings` in the map): one line each.
fn warnings(map: &DigestMap) -> Vec<String> {
    map.images
        .iter()
        .flat_map(|i| {
            i.platforms.iter().flat_map(move |p| {
                p.warnings.iter().map(move |w| {
                    format!("- {} {}: {}", code(&i.source), cell(&p.platform), cell(w))
                })
            })
        })
        .collect()
}

/// The Markdown of [`apply`], separate so it can be checked without the environment.
pub fn apply_markdown(map: &DigestMap, dry_run: bool, errors: &[(String, String)]) -> String {
    let n = map.images.len() + errors.len();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### runner-patch {}: {n} image{} ({})\n",
        if dry_run { "plan" } else { "apply" },
        if n == 1 { "" } else { "s" },
        tally(map, errors),
    );
    let _ = writeln!(
        md,
        "{}\n",
        if dry_run {
            format!(
                "Nothing was pushed. This is what `apply` will do with patch `{}`.",
                map.patch
            )
        } else {
            format!(
                "Patch `{}` applied; the digest map records every row below.",
                map.patch
            )
        }
    );
    let new_bytes = if dry_run { "to push" } else { "pushed" };
    let _ = writeln!(
        md,
        "| image | platform | outcome | original → patched | file | vLLM | read | {new_bytes} |"
    );
    md.push_str("|---|---|---|---|---|---|--:|--:|\n");
    rows(&mut md, map, errors);
    let reasons = reasons(map, errors);
    if !reasons.is_empty() {
        md.push_str("\nRefused or failed:\n\n");
        for r in reasons {
            let _ = writeln!(md, "{r}");
        }
    }
    let warnings = warnings(map);
    if !warnings.is_empty() {
        md.push_str("\nWarnings (not refused):\n\n");
        for w in warnings {
            let _ = writeln!(md, "{w}");
        }
    }
    md.push('\n');
    md
}

/// The summary of `verify`: one row per image and platform, with each difference found.
/// `checks` is the JSON the command prints with `--json` (`images`).
pub fn verify(ok: bool, checks: &Value, skipped: &[String]) {
    if summary_file().is_none() {
        return;
    }
    let mut md = format!(
        "### runner-patch verify: {}\n\n| image | platform | result | file | differences |\n|---|---|---|---|---|\n",
        if ok { "every image checks out" } else { "differences found" }
    );
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let problems = |v: &Value| {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|p| cell(&text(p)))
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_default()
    };
    for c in checks.as_array().into_iter().flatten() {
        let reference = code(&text(&c["reference"]));
        let image_ok = c["problems"].as_array().is_none_or(Vec::is_empty);
        let platforms = c["platforms"].as_array().cloned().unwrap_or_default();
        let all_ok = image_ok
            && platforms
                .iter()
                .all(|p| p["problems"].as_array().is_none_or(Vec::is_empty));
        let _ = writeln!(
            md,
            "| {reference} | all | {} |  | {} |",
            if all_ok { "ok" } else { "FAIL" },
            problems(&c["problems"])
        );
        for p in &platforms {
            let p_ok = p["problems"].as_array().is_none_or(Vec::is_empty);
            let file = p["file"].as_str().map(code).unwrap_or_default();
            let _ = writeln!(
                md,
                "| {reference} | {} | {} | {file} | {} |",
                cell(&text(&p["platform"])),
                if p_ok { "ok" } else { "FAIL" },
                problems(&p["problems"])
            );
        }
    }
    for s in skipped {
        let _ = writeln!(md, "| {} | all | skipped |  |  |", cell(s));
    }
    md.push('\n');
    append(&md);
}

/// The summary of `rollback`: every tag it moved (or would move), and from where to where.
/// `moves` is the JSON the command prints with `--json` (`moves`).
pub fn rollback(dry_run: bool, moves: &Value) {
    if summary_file().is_none() {
        return;
    }
    let mut md = format!(
        "### runner-patch rollback{}\n\n| tag | action | from → to |\n|---|---|---|\n",
        if dry_run {
            " (dry run: nothing moved)"
        } else {
            ""
        }
    );
    let rows = moves.as_array().cloned().unwrap_or_default();
    for m in &rows {
        let from = m["from"]
            .as_str()
            .map(code)
            .unwrap_or_else(|| "absent".into());
        let _ = writeln!(
            md,
            "| {} | {} | {from} → {} |",
            code(m["tag"].as_str().unwrap_or("")),
            cell(m["action"].as_str().unwrap_or("")),
            code(m["to"].as_str().unwrap_or("")),
        );
    }
    if rows.is_empty() {
        md.push_str("| (none) | nothing to roll back |  |\n");
    }
    md.push('\n');
    append(&md);
}

/// A message as the data of a workflow command: `%`, CR and LF escaped as the runner expects.
pub fn escape_command_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A `tracing` layer that turns warnings into `::warning::` workflow commands on stderr.
pub struct WarningCommands;

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_owned();
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WarningCommands {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if *event.metadata().level() != tracing::Level::WARN {
            return;
        }
        let mut m = Message(String::new());
        event.record(&mut m);
        let line = format!(
            "::warning title=runner-patch::{}\n",
            escape_command_data(&m.0)
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_patch::digest_map::ImageRecord;

    /// A record built from JSON, as a map on disk gives it (so fields added later default).
    fn record(outcome: &str, patched: Option<&str>) -> ImageRecord {
        serde_json::from_value(serde_json::json!({
            "source": "r.example/a/runner:cuda12.9-vllm0.27.1",
            "target": "r.example/a/runner:cuda12.9-vllm0.27.1",
            "outcome": outcome, "original_digest": "sha256:aa", "patched_digest": patched,
            "media_type": "x", "reason": "r", "bytes_to_push": 2048,
            "platforms": [{
                "platform": "linux/amd64", "outcome": outcome, "original_digest": "sha256:bb",
                "patched_digest": patched.map(|_| "sha256:cc"),
                "file": "/usr/x|y.py", "vllm_version": "0.27.1", "reason": "a | b\nc",
                "layers_scanned": 2, "bytes_scanned": 3 * 1024 * 1024, "bytes_to_push": 1024,
                "warnings": if outcome == "patched" { vec!["b 1.0 has requirement a>=2, but you have a 1.5."] } else { vec![] }
            }]
        }))
        .expect("a record")
    }

    #[test]
    fn plan_table_has_a_row_per_image_and_platform() {
        let map = DigestMap {
            patch: "p".into(),
            tool: "t".into(),
            created: "c".into(),
            images: vec![
                record("patched", Some("sha256:dd")),
                record("refused", None),
            ],
        };
        let md = apply_markdown(
            &map,
            true,
            &[("r.example/a/runner:x".into(), "boom".into())],
        );
        assert!(md.starts_with("### runner-patch plan: 3 images (1 patched, 1 refused, 1 error)"));
        assert!(md.contains("| `sha256:aa` → `sha256:dd` |"), "{md}");
        assert!(md.contains("| linux/amd64 | patched | `sha256:bb` → `sha256:cc` | `/usr/x\\|y.py` | 0.27.1 | 3.0 MiB | 1.0 KiB |"), "{md}");
        assert!(md.contains("| `sha256:bb` → none |"), "{md}");
        // A reason never breaks the table or the list.
        assert!(md.contains("linux/amd64: a \\| b c\n"), "{md}");
        assert!(md.contains("- `r.example/a/runner:x`: boom"), "{md}");
        // Warnings: one line each, after the refusals.
        assert!(md.contains("\nWarnings (not refused):\n\n- `r.example/a/runner:cuda12.9-vllm0.27.1` linux/amd64: b 1.0 has requirement a>=2, but you have a 1.5.\n"), "{md}");
        assert_eq!(md.matches("has requirement").count(), 1, "{md}");
        // Every table row has the header's 8 cells.
        for l in md.lines().filter(|l| l.starts_with('|')) {
            assert_eq!(l.replace("\\|", "").matches('|').count(), 9, "{l}");
        }
    }

    #[test]
    fn workflow_command_data_is_escaped() {
        assert_eq!(
            escape_command_data("50% done\r\nnext"),
            "50%25 done%0D%0Anext"
        );
    }
}
