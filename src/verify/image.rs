//! Checks of whole images: by reference (structure only, and the companion tags), or from a
//! digest map record (against the originals it names, and the tags it says moved).

use std::collections::HashMap;

use serde_json::Value;

use crate::digest_map::{split_tagged, DigestMap, ImageRecord};
use crate::image;
use crate::media::{is_attestation, Document, Kind};
use crate::patch::Outcome;
use crate::provenance;
use crate::registry::{Registry, Repo};
use crate::verify::platform::verify_platform;
use crate::verify::subject::Scope;
use crate::verify::types::{Checks, Error, ImageCheck, PlatformCheck};

/// The children of a document that are platforms (attestations left out), with their names.
async fn platforms(
    reg: &Registry,
    repo: &Repo,
    top: &Document,
) -> Result<Vec<(String, Document)>, Error> {
    let what = format!("{repo}@{}", top.digest);
    match image::Top::parse(top, &what)? {
        image::Top::Index(index) => {
            let mut out = Vec::new();
            for c in index.platforms() {
                let doc = reg
                    .manifest_get(&repo.at_digest(&c.descriptor.digest))
                    .await?;
                out.push((c.platform.clone(), doc));
            }
            Ok(out)
        }
        image::Top::Manifest(_) => Ok(vec![(String::from("(single manifest)"), top.clone())]),
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
) -> Result<Vec<String>, Error> {
    let mut problems = Vec::new();
    if !matches!(top.kind(), Some(Kind::Index(_))) {
        return Ok(problems);
    }
    for (platform, child) in children {
        let ctag = format!("{tag}-{}", crate::tags::companion_suffix(platform));
        if crate::tags::check(&ctag).is_err() {
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

/// Checks an image by reference (`REPO:TAG` or `REPO@DIGEST`): each platform's structure, its
/// provenance (unless `with_provenance` is false), and the companions of a tag.
pub async fn check_reference(
    reg: &Registry,
    checks: &Checks,
    input: &str,
    with_provenance: bool,
) -> Result<ImageCheck, Error> {
    let (repo, r) = Repo::parse_reference(input).map_err(|e| Error::Invalid(e.to_string()))?;
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
        let scope = Scope {
            tag: r.tag(),
            settled: Vec::new(),
        };
        let mut pc = verify_platform(reg, checks, &repo, name, &m, None, &scope).await?;
        if with_provenance {
            let found = provenance::check(reg, &repo, &m, None, None, &pc.seen).await?;
            pc.problems.extend(found.problems);
            pc.made_from = found.origins;
        }
        check.platforms.push(pc);
    }
    Ok(check)
}

/// Same children in the same order, with the same platform and annotations, and the same
/// index media type.
fn index_problems(top: &Document, original_top: &Document) -> Vec<String> {
    let mut problems = Vec::new();
    let (Some(Kind::Index(_)), Some(Kind::Index(_))) = (top.kind(), original_top.kind()) else {
        return problems;
    };
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
        problems.push(
            "the index's children differ from the original's in order, platform or annotations"
                .into(),
        );
    }
    if top.media_type != original_top.media_type {
        problems.push(format!(
            "index media type {} differs from the original's {}",
            top.media_type, original_top.media_type
        ));
    }
    problems
}

/// Checks the image a digest map record says a run patched, against the originals it names.
pub async fn check_record(
    reg: &Registry,
    checks: &Checks,
    rec: &ImageRecord,
    with_provenance: bool,
) -> Result<ImageCheck, Error> {
    let (source, _) = split_tagged(&rec.source)?;
    let (target, target_tag) = split_tagged(&rec.target)?;
    let patched = rec
        .patched_digest
        .clone()
        .ok_or_else(|| Error::Invalid(format!("{} has no patched digest", rec.target)))?;
    let mut check = ImageCheck {
        reference: rec.target.clone(),
        digest: patched.clone(),
        problems: Vec::new(),
        platforms: Vec::new(),
    };
    if rec.in_progress {
        check.problems.push(format!(
            "the run that patched {} did not finish moving its tags; run apply again with the same --digest-map",
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
    check.problems.extend(index_problems(&top, &original_top));
    let children = platforms(reg, &target, &top).await?;
    check
        .problems
        .extend(companion_problems(reg, &target, &target_tag, &top, &children).await?);
    for (name, m) in children {
        if let Some(pc) = record_platform(
            reg,
            checks,
            rec,
            &source,
            &target,
            name,
            &m,
            with_provenance,
        )
        .await?
        {
            check.platforms.push(pc);
        }
    }
    check.problems.extend(moved_companions(reg, rec).await?);
    Ok(check)
}

/// One child of a recorded image: a patched one checked against its original (and its
/// provenance), an unpatched one required to be exactly an original child.
#[allow(clippy::too_many_arguments)]
async fn record_platform(
    reg: &Registry,
    checks: &Checks,
    rec: &ImageRecord,
    source: &Repo,
    target: &Repo,
    name: String,
    m: &Document,
    with_provenance: bool,
) -> Result<Option<PlatformCheck>, Error> {
    let was_patched = rec.platforms.iter().any(|p| {
        p.outcome == Outcome::Patched && p.patched_digest.as_deref() == Some(m.digest.as_str())
    });
    if !was_patched {
        // A platform the run left as it was must still be exactly the original child.
        if rec.platforms.iter().any(|p| p.original_digest == m.digest) {
            return Ok(None);
        }
        let mut pc = PlatformCheck::new(name, m.digest.clone());
        pc.problems
            .push("child is neither a patched nor an original manifest of this image".into());
        return Ok(Some(pc));
    }
    let originals: HashMap<&str, &str> = rec
        .platforms
        .iter()
        .map(|p| {
            (
                p.patched_digest.as_deref().unwrap_or_default(),
                p.original_digest.as_str(),
            )
        })
        .collect();
    let orig_digest = originals
        .get(m.digest.as_str())
        .copied()
        .unwrap_or_default();
    let orig = reg.manifest_get(&source.at_digest(orig_digest)).await?;
    let tag = split_tagged(&rec.target).ok().map(|(_, t)| t);
    let settled = rec
        .platforms
        .iter()
        .find(|p| p.patched_digest.as_deref() == Some(m.digest.as_str()))
        .map(|p| {
            p.patches
                .iter()
                .filter(|x| x.outcome != Outcome::Patched)
                .map(|x| x.id.as_str())
                .collect()
        })
        .unwrap_or_default();
    let scope = Scope {
        tag: tag.as_deref(),
        settled,
    };
    let mut pc =
        verify_platform(reg, checks, target, name, m, Some((source, &orig)), &scope).await?;
    let recorded_prov = rec
        .platforms
        .iter()
        .find(|p| p.patched_digest.as_deref() == Some(m.digest.as_str()))
        .and_then(|p| p.provenance.as_ref());
    if let (Some(prov), true) = (recorded_prov, with_provenance) {
        let found = provenance::check(
            reg,
            target,
            m,
            Some(orig_digest),
            Some(&prov.digest),
            &pc.seen,
        )
        .await?;
        pc.problems.extend(found.problems);
        pc.made_from = found.origins;
    }
    Ok(Some(pc))
}

/// Each companion the record says moved must point at its patched child.
async fn moved_companions(reg: &Registry, rec: &ImageRecord) -> Result<Vec<String>, Error> {
    let mut problems = Vec::new();
    for c in &rec.companions {
        if !c.moved || rec.in_progress {
            continue;
        }
        let (crepo, ctag) = split_tagged(&c.target)?;
        let now = reg.manifest_digest(&crepo.at_tag(&ctag)).await?;
        if now != c.patched_digest {
            problems.push(format!(
                "companion {} points at {}, not at {}",
                c.target,
                now.as_deref().unwrap_or("nothing"),
                c.patched_digest.as_deref().unwrap_or("?")
            ));
        }
    }
    Ok(problems)
}

/// Every image a digest map records as carrying the patch: a patched one against its
/// original, an already patched one by its target tag (which must serve what the map says).
/// Returns the checks and the records skipped (`not-affected`, `refused`), named.
pub async fn check_map(
    reg: &Registry,
    checks: &Checks,
    map: &DigestMap,
    with_provenance: bool,
) -> Result<(Vec<ImageCheck>, Vec<String>), Error> {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for rec in &map.images {
        match rec.outcome {
            Outcome::Patched => out.push(check_record(reg, checks, rec, with_provenance).await?),
            Outcome::AlreadyPatched => {
                // What the tag served (the patched image), by tag so that its companions are
                // checked too.
                let mut c = check_reference(reg, checks, &rec.target, with_provenance).await?;
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
                out.push(c);
            }
            other => skipped.push(format!("{} ({other})", rec.source)),
        }
    }
    Ok((out, skipped))
}
