//! One platform of an image: each patch decides in turn on what the ones before it left, one
//! layer per patch that writes files, then the new config and manifest.

use std::sync::Arc;

use serde_json::Value;

use crate::image;
use crate::layer::{self, NewLayer};
use crate::media::{self, Descriptor, Document, Family};
use crate::patch::{bytecode, tree, Change, Outcome, Patch, Tree, Verdict};
use crate::plan::types::{Error, FileChange, NewImage, PatchStep, PlatformPlan, Run};
use crate::registry::Repo;
use crate::rewrite;
use crate::select::Platforms;
use crate::visible::{give_hashes, Search, Visible};

/// The platform name of a single-manifest tag, from its config.
fn platform_from_config(config: &Value) -> String {
    let os = config
        .get("os")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let arch = config
        .get("architecture")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    match config.get("variant").and_then(Value::as_str) {
        Some(v) => format!("{os}/{arch}/{v}"),
        None => format!("{os}/{arch}"),
    }
}

/// The platform's manifest as read: family, config descriptor and bytes, layers; and the
/// run's layers built so far, shared with the platforms that make the same changes.
struct Original {
    shared: Arc<layer::Shared>,
    repo: Repo,
    tag: String,
    manifest: Document,
    family: Family,
    config_desc: Descriptor,
    config: Vec<u8>,
    layers: Vec<Descriptor>,
}

/// What the patches of one platform have built so far, each on top of the last.
struct Stack {
    config: Vec<u8>,
    manifest: Document,
    layers: Vec<NewLayer>,
    file: Option<String>,
    version: Option<String>,
    shape: Option<String>,
}

/// Plans one platform manifest: scans for what the patches read, lets each patch decide in
/// turn on the tree the previous ones left, and builds one layer per patch that writes files
/// (a config edit for one that edits the config), then the new config and manifest.
pub(crate) async fn plan_platform(
    run: &Run,
    repo: &Repo,
    tag: &str,
    platform: String,
    manifest: Document,
    only: Option<&Platforms>,
) -> Result<PlatformPlan, Error> {
    let what = format!("{repo}@{}", manifest.digest);
    let image::Manifest {
        family,
        config: config_desc,
        layers,
    } = image::Manifest::parse(&manifest, &what)?;
    let (config, config_json) = config_of(run, repo, &config_desc, &what).await?;
    let platform = if platform.is_empty() {
        platform_from_config(&config_json)
    } else {
        platform
    };
    if let Some(only) = only.filter(|o| !o.allows(&platform)) {
        return Ok(PlatformPlan::left_out(platform, manifest, only));
    }
    let chosen = || {
        run.patches
            .iter()
            .filter(|p| crate::tags::excludes(p, tag).is_none())
    };
    let search = Search::of(chosen());
    let label = format!("{tag} {platform}");
    let (descent, ()) = tokio::join!(
        run.layers
            .scan_down(&run.reg, repo, &layers, &search, 1, &label),
        run.resolver.warm(chosen()),
    );
    let descent = descent?;
    if let Some(why) = &descent.refusal {
        let mut p = PlatformPlan::refused(platform, manifest, why.clone());
        p.layers_scanned = descent.layers_scanned;
        p.bytes_scanned = descent.bytes_scanned;
        return Ok(p);
    }
    let mut tree = Visible::new(&descent, config_json);
    let asker = format!("{repo}:{tag} {platform}");
    let patches = resolved(run, tag, &asker, &tree).await;
    let chosen = || {
        patches
            .iter()
            .filter(|p| crate::tags::excludes(p, tag).is_none())
    };
    let (reg, read) = (&run.reg, &run.layers);
    give_hashes(read, reg, repo, &layers, chosen(), &mut tree, &label).await?;
    let original = Original {
        shared: run.shared.clone(),
        repo: repo.clone(),
        tag: tag.to_owned(),
        manifest,
        family,
        config_desc,
        config,
        layers,
    };
    let mut stack = Stack::new(&original);
    let mut steps = Vec::new();
    for patch in &patches {
        steps.push(stack.decide(patch, &original, &mut tree)?);
    }
    let mut plan = platform_plan(platform, &original, steps, &stack);
    plan.layers_scanned = descent.layers_scanned;
    plan.bytes_scanned = descent.bytes_scanned;
    finish(&mut plan, &original, stack)?;
    Ok(plan)
}

/// The image's config: its bytes as served (bounded) and their JSON.
async fn config_of(
    run: &Run,
    repo: &Repo,
    desc: &media::Descriptor,
    what: &str,
) -> Result<(Vec<u8>, Value), Error> {
    let config = run
        .reg
        .blob_get_small(repo, desc, media::CONFIG_MAX_BYTES)
        .await?;
    let json = serde_json::from_slice(&config)
        .map_err(|e| Error::Image(format!("config {} of {what} is not JSON: {e}", desc.digest)))?;
    Ok((config, json))
}

/// The run's patches as they stand on this platform: requirement lines become a lock for it
/// before anything is hashed or decided.
async fn resolved(run: &Run, tag: &str, label: &str, tree: &Visible<'_>) -> Vec<Patch> {
    let mut patches = Vec::with_capacity(run.patches.len());
    for p in &run.patches {
        patches.push(match crate::tags::excludes(p, tag) {
            Some(_) => p.clone(),
            None => run.resolver.patch_for(p, tree, label).await,
        });
    }
    patches
}

/// The platform's outcome and reason from its patches' steps.
fn platform_plan(
    platform: String,
    original: &Original,
    steps: Vec<PatchStep>,
    stack: &Stack,
) -> PlatformPlan {
    let refusal = steps.iter().find(|s| s.outcome == Outcome::Refused);
    let outcome = match refusal {
        Some(_) => Outcome::Refused,
        None => steps
            .iter()
            .map(|s| s.outcome)
            .max()
            .unwrap_or(Outcome::NotAffected),
    };
    // One patch: its reason as it is (as before stacking existed); several: each named.
    let reason = match (refusal, steps.as_slice()) {
        (_, [one]) => one.reason.clone(),
        (Some(r), _) => format!("{}: {}", r.id, r.reason),
        (None, all) => all
            .iter()
            .map(|s| format!("{}: {}", s.id, s.reason))
            .collect::<Vec<_>>()
            .join("; "),
    };
    // Warnings of one patch as they are; of several, each named by its patch.
    let several = steps.len() > 1;
    let warnings = steps
        .iter()
        .flat_map(|s| {
            s.warnings.iter().map(move |w| match several {
                false => w.clone(),
                true => format!("{}: {w}", s.id),
            })
        })
        .collect();
    PlatformPlan {
        outcome,
        reason,
        warnings,
        file: stack.file.clone(),
        version: stack.version.clone(),
        shape: stack.shape.clone(),
        patches: steps,
        ..PlatformPlan::refused(platform, original.manifest.clone(), String::new())
    }
}

/// The new config and manifest of a patched platform, or the original a patched one names.
fn finish(plan: &mut PlatformPlan, original: &Original, stack: Stack) -> Result<(), Error> {
    match plan.outcome {
        Outcome::Patched => {
            let config_digest = crate::digest::sha256(&stack.config);
            let base = format!("{}:{}", original.repo, original.tag);
            let manifest = rewrite::manifest_set_config(
                &stack.manifest,
                &config_digest,
                stack.config.len() as u64,
            )
            .and_then(|m| rewrite::annotate_base(&m, &base, &original.manifest.digest))?;
            plan.new = Some(NewImage {
                layers: stack.layers,
                config: stack.config,
                config_digest,
                manifest,
            });
        }
        Outcome::AlreadyPatched => {
            plan.recorded_original = rewrite::recorded_original(&original.config)
        }
        _ => {}
    }
    Ok(())
}

impl Stack {
    /// Nothing stacked yet: the original config and manifest.
    fn new(original: &Original) -> Self {
        Stack {
            config: original.config.clone(),
            manifest: original.manifest.clone(),
            layers: Vec::new(),
            file: None,
            version: None,
            shape: None,
        }
    }

    /// Lets one patch decide on the tree as the patches before it left it, and stacks what it
    /// changes.
    fn decide(
        &mut self,
        patch: &Patch,
        original: &Original,
        tree: &mut Visible<'_>,
    ) -> Result<PatchStep, Error> {
        let meta = patch.meta();
        let mut step = PatchStep {
            id: meta.id.clone(),
            title: meta.title.clone(),
            definition_digest: meta.definition_digest.clone(),
            outcome: Outcome::NotAffected,
            reason: String::new(),
            layer: None,
            files: Vec::new(),
            warnings: Vec::new(),
            installed: Vec::new(),
        };
        if let Some(why) = crate::tags::excludes(patch, &original.tag) {
            step.reason = why;
            return Ok(step);
        }
        let verdict = patch.decide(tree);
        if let Some(f) = &verdict.about.file {
            self.file.get_or_insert_with(|| f.clone());
        }
        if self.version.is_none() {
            self.version = verdict.about.version.clone();
        }
        if let (None, Some(pkg)) = (&self.version, &meta.package) {
            self.version = tree::package_version_at_init(tree, pkg);
        }
        step.outcome = verdict.outcome;
        step.reason = verdict.reason.clone();
        step.warnings = verdict.warnings.clone();
        step.installed = verdict.installed.clone();
        if verdict.outcome == Outcome::Patched {
            self.apply(patch, verdict, original, tree, &mut step)?;
        }
        Ok(step)
    }

    /// Stacks a patched verdict: its layer (if it writes files), its config edit, and what it
    /// changed for the record; the tree then shows it to the next patch.
    fn apply(
        &mut self,
        patch: &Patch,
        verdict: Verdict,
        original: &Original,
        tree: &mut Visible<'_>,
        step: &mut PatchStep,
    ) -> Result<(), Error> {
        let hidden = verdict
            .changes
            .iter()
            .filter(|c| matches!(c, Change::Whiteout(_)))
            .count();
        if let Some(s) = &verdict.about.shape {
            self.shape.get_or_insert_with(|| s.clone());
            if hidden > 0 {
                step.reason
                    .push_str(&format!(", {hidden} stale .pyc hidden"));
            }
        }
        step.files = file_changes(&verdict.changes, tree);
        if let Some(first) = step.files.first() {
            self.file.get_or_insert_with(|| first.path.clone());
        }
        let changes = if verdict.changes.is_empty() {
            Vec::new()
        } else {
            bytecode::with_whiteouts(&verdict.changes, tree)
        };
        if !changes.is_empty() {
            self.append_layer(patch, &changes, original)?;
            step.layer = Some(self.layers.len() - 1);
        }
        if let Some(c) = verdict.config {
            // The edit was made on the tree's config, which is the current one.
            let id = &patch.meta().id;
            self.config = rewrite::config_labelled(
                c,
                &original.config_desc.digest,
                &original.manifest.digest,
                id,
            )?;
        }
        // The next patch decides on what this one left (its config included).
        let now: Value = serde_json::from_slice(&self.config)
            .map_err(|e| Error::Build(format!("the new config is not JSON: {e}")))?;
        tree.apply(&changes, Some(&now));
        Ok(())
    }

    /// Builds the layer of one patch's changes (bytecode whiteouts added) and appends it to
    /// the config and manifest being stacked.
    fn append_layer(
        &mut self,
        patch: &Patch,
        changes: &[Change],
        original: &Original,
    ) -> Result<(), Error> {
        let meta = patch.meta();
        let what = format!("{}@{}", original.repo, original.manifest.digest);
        let build = || {
            let shared = &original.shared;
            shared.layer(changes, meta.mtime_secs, original.family.layer_gzip())
        };
        let new_layer = off_the_runtime(build).map_err(|e| {
            Error::Build(format!("building the layer of {} for {what}: {e}", meta.id))
        })?;
        let base_layers = original.layers.len() + self.layers.len();
        self.config = rewrite::config_append(
            &self.config,
            &original.config_desc.digest,
            &original.manifest.digest,
            &new_layer.diff_id,
            &meta.id,
            &meta.mtime,
            &meta.title,
            base_layers,
        )?;
        self.manifest = rewrite::manifest_append(
            &self.manifest,
            "",
            0,
            &new_layer.media_type,
            &new_layer.digest,
            new_layer.size(),
        )?;
        self.layers.push(new_layer);
        Ok(())
    }
}

/// Runs a blocking step (a layer that may read and compress hundreds of MB) so that the
/// runtime's other tasks (other platforms' downloads) move to another worker meanwhile.
fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Each path a patch writes or hides, with the sha256 of what the tree showed before and of
/// what it writes.
fn file_changes(changes: &[Change], tree: &Visible<'_>) -> Vec<FileChange> {
    let mut out = Vec::new();
    for c in changes {
        let before = tree
            .file(c.path())
            .ok()
            .flatten()
            .map(|e| crate::digest::sha256(&e.content));
        let after = c.written_sha256();
        if before.is_some() || after.is_some() {
            out.push(FileChange {
                path: format!("/{}", c.path()),
                before,
                after,
            });
        }
    }
    out
}
