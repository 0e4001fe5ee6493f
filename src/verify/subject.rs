//! The patched platform being verified, as read once: its manifest, layers and config, the
//! patches its label names (and those asked for), and which layers this tool appended.

use serde_json::Value;

use crate::media::{Descriptor, Document, Family};
use crate::patch::Patch;
use crate::registry::{Registry, Repo};
use crate::rewrite::PATCH_LABEL;
use crate::verify::types::Checks;

/// Everything the checks of one platform share.
pub(crate) struct Subject<'a> {
    pub reg: &'a Registry,
    pub checks: &'a Checks,
    pub repo: &'a Repo,
    pub manifest: &'a Document,
    pub family: Family,
    pub layers: Vec<Descriptor>,
    pub config: Value,
    /// The config label's text (`dev.runner-patch.patches`).
    pub label: String,
    /// The patch ids the label names, in order.
    pub named: Vec<String>,
    /// The patches to check: those named and known, then those asked for and not named.
    pub expected: Vec<&'a Patch>,
    /// The patch id of each appended layer, in order.
    pub layered: Vec<String>,
    /// The index of the first appended layer.
    pub first_added: usize,
    /// Whether any expected patch appends a layer.
    pub wants_layer: bool,
}

/// Whether a history entry was written by this tool (a layer, or a config edit): its patch id
/// and whether it is `empty_layer`.
pub(crate) fn ours(h: &Value) -> Option<(&str, bool)> {
    let by = h.get("created_by")?.as_str()?;
    let id = by.strip_prefix("runner-patch: ")?;
    let id = id.split(' ').next().unwrap_or(id);
    let empty = h.get("empty_layer").and_then(Value::as_bool) == Some(true);
    Some((id, empty))
}

impl<'a> Subject<'a> {
    /// Reads the label and the history this tool appended; what disagrees goes to `problems`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        reg: &'a Registry,
        checks: &'a Checks,
        repo: &'a Repo,
        manifest: &'a Document,
        family: Family,
        layers: Vec<Descriptor>,
        config: Value,
        scope: &Scope,
        problems: &mut Vec<String>,
    ) -> Self {
        let label = config["config"]["Labels"][PATCH_LABEL]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let named = crate::rewrite::patches_of(&config);
        let (expected, wants_layer) = expected(checks, scope, &named, problems);
        let mut s = Subject {
            reg,
            checks,
            repo,
            manifest,
            family,
            layers,
            config,
            label,
            named,
            wants_layer,
            expected,
            layered: Vec::new(),
            first_added: 0,
        };
        s.read_history(problems);
        s
    }

    /// The history this tool appended, from the end: one entry per layer, config edits empty.
    fn read_history(&mut self, problems: &mut Vec<String>) {
        let history = self.config["history"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut tail: Vec<(String, bool)> = history
            .iter()
            .rev()
            .map_while(|h| ours(h).map(|(id, empty)| (id.to_owned(), empty)))
            .collect();
        tail.reverse();
        let last_id = self
            .named
            .last()
            .cloned()
            .or_else(|| self.checks.requested.last().map(|p| p.meta().id.clone()))
            .unwrap_or_default();
        if history.last().and_then(ours).is_none() {
            problems.push(format!(
                "the config's last history entry is not \"runner-patch: {last_id}\""
            ));
        }
        self.layered = tail
            .into_iter()
            .filter(|(_, e)| !*e)
            .map(|(id, _)| id)
            .collect();
        let added_count = self.layered.len().min(self.layers.len());
        self.first_added = self.layers.len() - added_count;
        self.layered.truncate(added_count);
        if self.wants_layer && added_count == 0 {
            problems.push(format!(
                "{}@{} has no layer of this tool on top (its history ends without one)",
                self.repo, self.manifest.digest
            ));
        }
    }
}

/// What a digest map says about one platform beyond its digests, so that a patch asked for is
/// expected only where the run applied it.
#[derive(Debug, Default)]
pub struct Scope<'a> {
    /// The tag the platform is served under: a patch asked for that is not for the runner
    /// tag's backend or service (an `env` patch of another backend stacked in the same run)
    /// was not-affected there and is not expected.
    pub tag: Option<&'a str>,
    /// Patches the run that wrote the map found already done (or not for this platform): the
    /// label need not name them, and they need no layer, but their work must be seen.
    pub settled: Vec<&'a str>,
}

/// The patches the label names, in order, then those asked for that it does not name; each
/// one asked for must be named (unless settled), and each named one known. Also whether a
/// layer of this tool must be on top.
fn expected<'a>(
    checks: &'a Checks,
    scope: &Scope,
    named: &[String],
    problems: &mut Vec<String>,
) -> (Vec<&'a Patch>, bool) {
    let runner = scope.tag.and_then(crate::tags::RunnerTag::parse);
    let requested: Vec<&Patch> = checks
        .requested
        .iter()
        .filter(|p| {
            runner
                .as_ref()
                .is_none_or(|t| p.meta().selects(&t.service, &t.backend))
        })
        .collect();
    let settled = |p: &Patch| scope.settled.contains(&p.meta().id.as_str());
    for p in &requested {
        if !named.iter().any(|n| *n == p.meta().id) && !settled(p) {
            problems.push(format!("label {PATCH_LABEL} does not name {}", p.meta().id));
        }
    }
    let mut expected: Vec<&Patch> = Vec::new();
    for id in named {
        match checks.find(id) {
            Some(p) => expected.push(p),
            None => problems.push(format!(
                "label {PATCH_LABEL} names patch {id}, which this run does not know (give it with --patch)"
            )),
        }
    }
    for p in requested {
        if !expected.iter().any(|e| e.meta().id == p.meta().id) {
            expected.push(p);
        }
    }
    let wants_layer = expected
        .iter()
        .any(|p| p.kind().adds_layer() && !settled(p));
    (expected, wants_layer)
}
