//! `runner-patch verify`: check patched images, from a digest map (against their originals) or
//! by reference (structure only). Exit 1 when anything differs, naming it.

use std::collections::HashMap;

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};

use super::Status;
use crate::cli::{Global, VerifyArgs};
use runner_patch::digest_map::DigestMap;

/// `REPO:TAG` of a map entry, as an error this command reports.
fn split_tagged(s: &str) -> Result<(Repo, String)> {
    runner_patch::digest_map::split_tagged(s).map_err(|e| anyhow!(e))
}
use runner_patch::image;
use runner_patch::media::{is_attestation, Document, Kind};
use runner_patch::provenance;
use runner_patch::registry::{Registry, Repo};
use runner_patch::verify::{verify_platform, Checks, PlatformCheck};

/// One image's checks.
#[derive(Debug, serde::Serialize)]
struct ImageCheck {
    reference: String,
    digest: String,
    problems: Vec<String>,
    platforms: Vec<PlatformCheck>,
}

impl ImageCheck {
    fn ok(&self) -> bool {
        self.problems.is_empty() && self.platforms.iter().all(|p| p.problems.is_empty())
    }
}

/// The children of a document that are platforms (attestations left out), with their names.
async fn platforms(reg: &Registry, repo: &Repo, top: &Document) -> Result<Vec<(String, Document)>> {
    match image::View::parse(top, &format!("{repo}@{}", top.digest)).map_err(|e| anyhow!(e))? {
        image::View::Index(index) => {
            let mut out = Vec::new();
            for c in index.platforms() {
                let doc = reg
                    .manifest_get(&repo.at_digest(&c.descriptor.digest))
                    .await?;
                out.push((c.platform.clone(), doc));
            }
            Ok(out)
        }
        image::View::Manifest(_) => Ok(vec![(String::from("(single manifest)"), top.clone())]),
    }
}

/// Every per-platform companion tag (`<tag>-linux-<arch>`) that exists must point at its
/// platform's child of the index the tag serves, whether or not a run recorded moving it.
async fn companion_problems(
    reg: &Registry,
    repo: &Repo,
    tag: &str,
    top: &Document,
    children: &[(String, Document)],
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    if !matches!(top.kind(), Some(Kind::Index(_))) {
        return Ok(problems);
    }
    for (platform, child) in children {
        let ctag = format!("{tag}-{}", runner_patch::tags::companion_suffix(platform));
        if runner_patch::tags::check(&ctag).is_err() {
            continue;
        }
        if let Some(now) = reg.manifest_digest(&repo.at_tag(&ctag)).await? {
            if now != child.digest {
                problems.push(format!(
                    "companion {repo}:{ctag} points at {now}, not at the {platform} child {} of {repo}:{tag}",
                    child.digest
                ));
            }
        }
    }
    Ok(problems)
}

async fn check_reference(
    reg: &Registry,
    spec: &Checks,
    input: &str,
    with_provenance: bool,
) -> Result<ImageCheck> {
    let (repo, r) = Repo::parse_reference(input).map_err(|e| anyhow!(e))?;
    let top = reg.manifest_get(&r).await?;
    let mut check = ImageCheck {
        reference: input.to_owned(),
        digest: top.digest.clone(),
        problems: Vec::new(),
        platforms: Vec::new(),
    };
    let children = platforms(reg, &repo, &top).await?;
    if let Some(tag) = r.tag() {
        check
            .problems
            .extend(companion_problems(reg, &repo, tag, &top, &children).await?);
    }
    for (name, m) in children {
        let mut pc = verify_platform(reg, spec, &repo, name, &m, None).await?;
        if with_provenance {
            let found = provenance::check(reg, &repo, &m, None, None, &pc.seen).await?;
            pc.problems.extend(found.problems);
            pc.made_from = found.origins;
        }
        check.platforms.push(pc);
    }
    Ok(check)
}

async fn check_record(
    reg: &Registry,
    spec: &Checks,
    rec: &runner_patch::digest_map::ImageRecord,
    with_provenance: bool,
) -> Result<ImageCheck> {
    let (source, _) = split_tagged(&rec.source)?;
    let (target, target_tag) = split_tagged(&rec.target)?;
    let patched = rec
        .patched_digest
        .clone()
        .ok_or_else(|| anyhow!("{} has no patched digest", rec.target))?;
    let mut check = ImageCheck {
        reference: rec.target.clone(),
        digest: patched.clone(),
        problems: Vec::new(),
        platforms: Vec::new(),
    };
    if rec.in_progress {
        check.problems.push(format!(
            "the run that patched {} did not finish moving its tags; run apply again with the same --manifest",
            rec.target
        ));
    }
    let now = reg.manifest_digest(&target.at_tag(&target_tag)).await?;
    if now.as_deref() != Some(patched.as_str()) {
        check.problems.push(format!(
            "{} points at {}, not at the patched {patched}",
            rec.target,
            now.as_deref().unwrap_or("nothing")
        ));
    }
    let top = reg.manifest_get(&target.at_digest(&patched)).await?;
    let original_top = reg
        .manifest_get(&source.at_digest(&rec.original_digest))
        .await?;
    let originals: HashMap<String, String> = rec
        .platforms
        .iter()
        .map(|p| {
            (
                p.patched_digest.clone().unwrap_or_default(),
                p.original_digest.clone(),
            )
        })
        .collect();
    if let (Some(Kind::Index(_)), Some(Kind::Index(_))) = (top.kind(), original_top.kind()) {
        // Same children in the same order, with the same platform and annotations.
        let strip = |v: &Value| -> Vec<Value> {
            v["manifests"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| !is_attestation(m))
                .map(|m| {
                    let mut m = m.clone();
                    if let Some(o) = m.as_object_mut() {
                        o.remove("digest");
                        o.remove("size");
                    }
                    m
                })
                .collect()
        };
        if strip(&top.json) != strip(&original_top.json) {
            check.problems.push(
                "the index's children differ from the original's in order, platform or annotations"
                    .into(),
            );
        }
        if top.media_type != original_top.media_type {
            check.problems.push(format!(
                "index media type {} differs from the original's {}",
                top.media_type, original_top.media_type
            ));
        }
    }
    let children = platforms(reg, &target, &top).await?;
    check
        .problems
        .extend(companion_problems(reg, &target, &target_tag, &top, &children).await?);
    for (name, m) in children {
        let was_patched = rec.platforms.iter().any(|p| {
            p.outcome == "patched" && p.patched_digest.as_deref() == Some(m.digest.as_str())
        });
        if !was_patched {
            // A platform the run left as it was must still be exactly the original child.
            if !rec.platforms.iter().any(|p| p.original_digest == m.digest) {
                check.platforms.push(PlatformCheck {
                    platform: name,
                    digest: m.digest.clone(),
                    file: None,
                    problems: vec![
                        "child is neither a patched nor an original manifest of this image".into(),
                    ],
                    made_from: Vec::new(),
                    seen: Default::default(),
                });
            }
            continue;
        }
        let orig_digest = originals.get(&m.digest).cloned().unwrap_or_default();
        let orig = reg.manifest_get(&source.at_digest(&orig_digest)).await?;
        let mut pc = verify_platform(reg, spec, &target, name, &m, Some((&source, &orig))).await?;
        let recorded = rec
            .platforms
            .iter()
            .find(|p| p.patched_digest.as_deref() == Some(m.digest.as_str()))
            .and_then(|p| p.provenance.as_ref());
        if let (Some(prov), true) = (recorded, with_provenance) {
            let found = provenance::check(
                reg,
                &target,
                &m,
                Some(&orig_digest),
                Some(&prov.digest),
                &pc.seen,
            )
            .await?;
            pc.problems.extend(found.problems);
            pc.made_from = found.origins;
        }
        check.platforms.push(pc);
    }
    for c in &rec.companions {
        if !c.moved || rec.in_progress {
            continue;
        }
        let (crepo, ctag) = split_tagged(&c.target)?;
        let now = reg.manifest_digest(&crepo.at_tag(&ctag)).await?;
        if now != c.patched_digest {
            check.problems.push(format!(
                "companion {} points at {}, not at {}",
                c.target,
                now.as_deref().unwrap_or("nothing"),
                c.patched_digest.as_deref().unwrap_or("?")
            ));
        }
    }
    Ok(check)
}

pub fn run(g: &Global, a: &VerifyArgs) -> Result<Status> {
    let spec = Checks {
        requested: super::load_patches(g).map_err(|e| anyhow!(e))?,
        known: runner_patch::patches::catalogue(g.patches_dir.as_deref())
            .map_err(|e| anyhow!(e))?,
        layers: Default::default(),
    };
    if a.references.is_empty() && a.manifest.is_none() {
        bail!("give references to check, or --manifest PATH");
    }
    let map = a
        .manifest
        .as_deref()
        .map(DigestMap::read)
        .transpose()
        .map_err(|e| anyhow!(e))?;
    let mut repos = Vec::new();
    for r in &a.references {
        repos.push(Repo::parse_reference(r).map_err(|e| anyhow!(e))?.0);
    }
    if let Some(m) = &map {
        repos.extend(m.repos().map_err(|e| anyhow!(e))?);
    }
    let rt = super::runtime()?;
    rt.block_on(async {
        let reg = Registry::new(
            &repos.iter().collect::<Vec<_>>(),
            super::registry_settings(g),
        )?;
        let mut checks = Vec::new();
        let mut skipped = Vec::new();
        if let Some(m) = &map {
            for rec in &m.images {
                match rec.outcome.as_str() {
                    "patched" => {
                        checks.push(check_record(&reg, &spec, rec, !a.no_provenance).await?)
                    }
                    "already-patched" => {
                        // What the tag served (the patched image), by tag so that its
                        // companions are checked too.
                        let mut c =
                            check_reference(&reg, &spec, &rec.target, !a.no_provenance).await?;
                        let expect = rec
                            .patched_digest
                            .as_deref()
                            .unwrap_or(&rec.original_digest);
                        if c.digest != expect {
                            c.problems.push(format!(
                                "{} points at {}, not at {expect}",
                                rec.target, c.digest
                            ));
                        }
                        checks.push(c);
                    }
                    other => skipped.push(format!("{} ({other})", rec.source)),
                }
            }
        }
        for r in &a.references {
            checks.push(check_reference(&reg, &spec, r, !a.no_provenance).await?);
        }
        let ok = checks.iter().all(ImageCheck::ok);
        crate::summary::verify(ok, &serde_json::to_value(&checks)?, &skipped);
        if a.json {
            crate::output::print(&serde_json::to_string_pretty(
                &json!({"ok": ok, "images": checks, "skipped": skipped}),
            )?)?;
        } else {
            for c in &checks {
                let mut out = format!("{} {}", if c.ok() { "ok  " } else { "FAIL" }, c.reference);
                for p in &c.problems {
                    out.push_str(&format!("\n  - {p}"));
                }
                for p in &c.platforms {
                    out.push_str(&format!(
                        "\n  {} {:<16} {}",
                        if p.problems.is_empty() {
                            "ok  "
                        } else {
                            "FAIL"
                        },
                        p.platform,
                        p.file.as_deref().unwrap_or("")
                    ));
                    for x in &p.made_from {
                        out.push_str(&format!("\n      made from {x}"));
                    }
                    for x in &p.problems {
                        out.push_str(&format!("\n      - {x}"));
                    }
                }
                crate::output::print(&out)?;
            }
            for s in &skipped {
                crate::output::print(&format!("skip {s}"))?;
            }
        }
        Ok(if ok { Status::Success } else { Status::Refused })
    })
}
