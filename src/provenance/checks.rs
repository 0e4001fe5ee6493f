//! `verify`'s checks of a statement against the image it describes, each naming the field.

use serde_json::Value;

use crate::media::{Descriptor, Document};
use crate::patch::Seen;
use crate::provenance::artifact::{is_provenance, referrers};
use crate::provenance::error::Error;
use crate::provenance::statement::{ARTIFACT_TYPE, PREDICATE_TYPE, STATEMENT_TYPE};
use crate::registry::{Registry, Repo};

/// What the provenance check found: disagreements, and per statement where the image came from
/// (`REPO@ORIGINAL + patch ID`), for people reading `verify`.
#[derive(Debug, Clone, Default)]
pub struct Checked {
    pub problems: Vec<String>,
    pub origins: Vec<String>,
}

/// What a statement is checked against: the manifest, its layers and config, the original a
/// digest map recorded, and what `verify` read of the file.
struct Facts<'a> {
    manifest: &'a Document,
    layers: Vec<Descriptor>,
    config: Option<String>,
    original: Option<&'a str>,
    seen: &'a Seen,
}

pub(crate) fn find_named<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list.as_array()?
        .iter()
        .find(|r| r.get("name").and_then(Value::as_str) == Some(name))
}

pub(crate) fn sha_of(r: Option<&Value>) -> Option<String> {
    r?.get("digest")?
        .get("sha256")?
        .as_str()
        .map(|h| format!("sha256:{h}"))
}

/// Checks the provenance of one patched platform manifest: an artifact is attached, and its
/// statement agrees with the image. `original` is the digest it must name (from a digest map),
/// else the statement's own is checked against the original manifest it names; `recorded` is
/// the artifact the digest map says was attached. Returns the disagreements, each naming the
/// field.
pub async fn check(
    reg: &Registry,
    repo: &Repo,
    manifest: &Document,
    original: Option<&str>,
    recorded: Option<&str>,
    seen: &Seen,
) -> Result<Checked, Error> {
    let mut out = Checked::default();
    let (listed, _) = referrers(reg, repo, &manifest.digest).await?;
    if let Some(r) = recorded {
        if !listed
            .iter()
            .any(|d| d.get("digest").and_then(Value::as_str) == Some(r))
        {
            out.problems.push(format!(
                "provenance: the artifact {r} recorded in the digest map is not attached to {}",
                manifest.digest
            ));
        }
    }
    let ours: Vec<&Value> = listed.iter().filter(|d| is_provenance(d)).collect();
    if ours.is_empty() {
        out.problems.push(format!(
            "provenance: no statement is attached to {} (no {PREDICATE_TYPE} referrer)",
            manifest.digest
        ));
        return Ok(out);
    }
    let facts = Facts {
        manifest,
        layers: manifest
            .json
            .get("layers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|l| Descriptor::from_json(l, "layer").ok())
            .collect(),
        config: manifest.json["config"]["digest"]
            .as_str()
            .map(str::to_owned),
        original,
        seen,
    };
    for d in ours {
        let Some((at, desc, st)) = fetch(reg, repo, manifest, d, &mut out.problems).await? else {
            continue;
        };
        out.origins.push(origin_of(&st, &desc));
        check_statement(reg, &st, &facts, &at, &mut out.problems).await?;
    }
    Ok(out)
}

/// The artifact a referrer names and its statement (`at` names it in problems); `None` when
/// it is missing or unreadable, which is a problem of the image, not an error of the run.
async fn fetch(
    reg: &Registry,
    repo: &Repo,
    manifest: &Document,
    d: &Value,
    problems: &mut Vec<String>,
) -> Result<Option<(String, Descriptor, Value)>, Error> {
    let desc = match Descriptor::from_json(d, &format!("referrers of {}", manifest.digest)) {
        Ok(desc) => desc,
        Err(e) => {
            problems.push(format!("provenance: statement missing: {e}"));
            return Ok(None);
        }
    };
    let at = format!("provenance {}", desc.digest);
    let art = match reg.manifest_get(&repo.at_digest(&desc.digest)).await {
        Ok(a) => a,
        Err(e) => {
            problems.push(format!("{at}: statement missing: {e}"));
            return Ok(None);
        }
    };
    let subject = art.json["subject"]["digest"].as_str().unwrap_or("none");
    if subject != manifest.digest {
        problems.push(format!(
            "{at}: artifact subject digest is {subject}, not the manifest's {}",
            manifest.digest
        ));
    }
    let Some(layer) = art.json["layers"].as_array().and_then(|l| {
        l.iter()
            .find(|x| x.get("mediaType").and_then(Value::as_str) == Some(ARTIFACT_TYPE))
    }) else {
        problems.push(format!(
            "{at}: statement missing (no {ARTIFACT_TYPE} layer)"
        ));
        return Ok(None);
    };
    let ldesc = Descriptor::from_json(layer, &format!("{at} layers"))?;
    let bytes = match reg.blob_get_small(repo, &ldesc, 4 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => {
            problems.push(format!("{at}: statement missing: {e:#}"));
            return Ok(None);
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(v) => Ok(Some((at, desc, v))),
        Err(e) => {
            problems.push(format!("{at}: statement is not JSON: {e}"));
            Ok(None)
        }
    }
}

/// Where a statement says the image came from: `REPO@ORIGINAL + patch ID (provenance D)`.
fn origin_of(st: &Value, desc: &Descriptor) -> String {
    let pred = &st["predicate"];
    let deps = &pred["buildDefinition"]["resolvedDependencies"];
    let params = &pred["buildDefinition"]["externalParameters"];
    format!(
        "{}@{} + patch {} (provenance {})",
        params["source"]
            .as_str()
            .and_then(|s| Repo::parse_reference(s).ok())
            .map_or("?".to_owned(), |(r, _)| r.to_string()),
        sha_of(find_named(deps, "manifest"))
            .as_deref()
            .unwrap_or("?"),
        params["patches"][0]["id"].as_str().unwrap_or("?"),
        desc.digest
    )
}

/// Every check of one statement against the facts.
async fn check_statement(
    reg: &Registry,
    st: &Value,
    facts: &Facts<'_>,
    at: &str,
    problems: &mut Vec<String>,
) -> Result<(), Error> {
    let digest = &facts.manifest.digest;
    for (field, want) in [("_type", STATEMENT_TYPE), ("predicateType", PREDICATE_TYPE)] {
        if st[field].as_str() != Some(want) {
            problems.push(format!("{at}: {field} is {}, not {want}", st[field]));
        }
    }
    let subj = sha_of(st["subject"].get(0));
    if subj.as_deref() != Some(digest.as_str()) {
        problems.push(format!(
            "{at}: subject digest {} is not the manifest's {digest}",
            subj.as_deref().unwrap_or("none"),
        ));
    }
    check_original(reg, st, facts, at, problems).await?;
    check_byproducts(st, facts, at, problems);
    check_files(st, facts.seen, at, problems);
    Ok(())
}

/// The original the statement names: the recorded one, or (without a map) an image that is
/// this one without its patch layers.
async fn check_original(
    reg: &Registry,
    st: &Value,
    facts: &Facts<'_>,
    at: &str,
    problems: &mut Vec<String>,
) -> Result<(), Error> {
    let pred = &st["predicate"];
    let deps = &pred["buildDefinition"]["resolvedDependencies"];
    let named_original = sha_of(find_named(deps, "manifest"));
    match (facts.original, named_original.as_deref()) {
        (Some(want), got) if got != Some(want) => problems.push(format!(
            "{at}: original digest {} is not the recorded original {want}",
            got.unwrap_or("none")
        )),
        (None, None) => problems.push(format!("{at}: original digest missing")),
        (None, Some(got)) => {
            let added = named_layers_of(pred);
            if let Some(p) = original_mismatch(reg, st, got, &facts.layers, added).await? {
                problems.push(format!("{at}: original digest {got}: {p}"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// The layers the statement names (one per file patch) are the manifest's last ones, and its
/// config is the manifest's.
fn check_byproducts(st: &Value, facts: &Facts<'_>, at: &str, problems: &mut Vec<String>) {
    let by = &st["predicate"]["runDetails"]["byproducts"];
    let layers = &facts.layers;
    let named_layers: Vec<String> = by
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b.get("name").and_then(Value::as_str) == Some("layer"))
        .filter_map(|b| sha_of(Some(b)))
        .collect();
    let added: Vec<String> = layers
        .iter()
        .rev()
        .take(named_layers.len())
        .rev()
        .map(|l| l.digest.clone())
        .collect();
    if named_layers != added {
        problems.push(format!(
            "{at}: layer digest {} is not the manifest's last layer {}",
            named_layers.last().map_or("none", String::as_str),
            layers.last().map_or("none", |l| l.digest.as_str())
        ));
    }
    let named_config = sha_of(find_named(by, "config"));
    if named_config != facts.config {
        problems.push(format!(
            "{at}: config digest {} is not the manifest's {}",
            named_config.as_deref().unwrap_or("none"),
            facts.config.as_deref().unwrap_or("none")
        ));
    }
}

/// The file digests the statement names agree with what `verify` read (when the statement is
/// about the patch that wrote the file).
fn check_files(st: &Value, seen: &Seen, at: &str, problems: &mut Vec<String>) {
    let pred = &st["predicate"];
    let deps = &pred["buildDefinition"]["resolvedDependencies"];
    let by = &pred["runDetails"]["byproducts"];
    let stated: Vec<&str> = pred["buildDefinition"]["externalParameters"]["patches"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["id"].as_str())
        .collect();
    let about_file = seen.by.as_deref().is_none_or(|b| stated.contains(&b));
    let (Some(file), true) = (&seen.file, about_file) else {
        return;
    };
    for (role, list, want) in [
        ("original file digest", deps, &seen.original_file),
        ("patched file digest", by, &seen.patched_file),
    ] {
        let got = sha_of(find_named(list, file));
        match want {
            Some(w) if got.as_deref() != Some(w.as_str()) => problems.push(format!(
                "{at}: {role} of {file} is {}, but the image's is {w}",
                got.as_deref().unwrap_or("none")
            )),
            _ => {}
        }
    }
}

/// How many layers a predicate says the patches appended.
fn named_layers_of(pred: &Value) -> usize {
    pred["runDetails"]["byproducts"]
        .as_array()
        .map_or(0, |b| b.iter().filter(|x| x["name"] == "layer").count())
}

/// Without a digest map: the original a statement names must exist where it says and be this
/// image without its last layer.
async fn original_mismatch(
    reg: &Registry,
    st: &Value,
    original: &str,
    layers: &[Descriptor],
    added: usize,
) -> Result<Option<String>, Error> {
    let Some(source) = st["predicate"]["buildDefinition"]["externalParameters"]["source"].as_str()
    else {
        return Ok(Some("the statement names no source".into()));
    };
    let Ok((repo, _)) = Repo::parse_reference(source) else {
        return Ok(Some(format!("source {source:?} is not a reference")));
    };
    let doc = match reg.manifest_get(&repo.at_digest(original)).await {
        Ok(d) => d,
        Err(e) => return Ok(Some(format!("not found in {repo}: {e}"))),
    };
    let theirs: Vec<String> = doc.json["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.get("digest").and_then(Value::as_str).map(str::to_owned))
        .collect();
    let ours: Vec<String> = layers.iter().map(|l| l.digest.clone()).collect();
    if theirs.len() + added != ours.len() || ours[..theirs.len()] != theirs[..] {
        return Ok(Some(
            "its layers are not this image's layers without the patch layers".into(),
        ));
    }
    Ok(None)
}
