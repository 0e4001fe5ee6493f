use serde_json::Value;

use super::checks::{find_named, sha_of};
use super::statement::EMPTY;
use super::*;
use crate::media::Document;
use crate::plan::ImagePlan;
use crate::registry::Repo;

use crate::layer::NewLayer;
use crate::patch::Outcome;
use crate::plan::{NewImage, PlatformPlan};

#[test]
fn empty_descriptor_is_the_digest_of_braces() {
    assert_eq!(crate::digest::sha256(EMPTY), EMPTY_DIGEST);
    assert_eq!(referrers_tag("sha256:ab12"), "sha256-ab12");
}

fn manifest(layers: &str) -> Document {
    Document::parse(
        format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:{}","size":1}},"layers":[{layers}]}}"#,
            "c".repeat(64)
        )
        .into_bytes(),
        "test manifest",
    )
    .expect("parse")
}

fn plan() -> (ImagePlan, crate::patch::Meta) {
    let spec = crate::patch::catalogue::builtin()
        .expect("builtin")
        .into_iter()
        .next()
        .expect("a patch")
        .meta()
        .clone();
    let repo = Repo::parse("127.0.0.1:5000/gpustack/runner").expect("repo");
    let original = manifest("");
    let new = manifest(&format!(
        r#"{{"mediaType":"x","digest":"sha256:{}","size":3}}"#,
        "b".repeat(64)
    ));
    let layer = NewLayer {
        blob: crate::layer::LayerBlob::memory(vec![1, 2, 3]),
        digest: format!("sha256:{}", "b".repeat(64)),
        diff_id: format!("sha256:{}", "d".repeat(64)),
        media_type: crate::media::DOCKER_LAYER_GZIP.into(),
        mtime: 0,
    };
    let platform = PlatformPlan {
        platform: "linux/amd64".into(),
        original: original.clone(),
        outcome: Outcome::Patched,
        reason: String::new(),
        warnings: Vec::new(),
        file: Some("/x/multi_connector.py".into()),
        version: None,
        shape: None,
        layers_scanned: 1,
        bytes_scanned: 1,
        new: Some(NewImage {
            layers: vec![layer],
            config: b"{}".to_vec(),
            config_digest: format!("sha256:{}", "e".repeat(64)),
            manifest: new.clone(),
        }),
        patches: vec![crate::plan::PatchStep {
            id: spec.id.clone(),
            title: spec.title.clone(),
            definition_digest: spec.definition_digest.clone(),
            outcome: Outcome::Patched,
            reason: String::new(),
            layer: Some(0),
            files: vec![crate::plan::FileChange {
                path: "/x/multi_connector.py".into(),
                before: Some(format!("sha256:{}", "1".repeat(64))),
                after: Some(format!("sha256:{}", "2".repeat(64))),
            }],
            warnings: Vec::new(),
            installed: Vec::new(),
        }],
        recorded_original: None,
    };
    let plan = ImagePlan {
        source: repo.clone(),
        tag: "cuda12.9-vllm0.27.1".into(),
        target: repo,
        target_tag: "cuda12.9-vllm0.27.1".into(),
        original,
        platforms: vec![platform],
        new_top: Some(new),
        dropped: Vec::new(),
        companions: Vec::new(),
        outcome: Outcome::Patched,
        reason: String::new(),
        recorded_original: None,
    };
    (plan, spec)
}

#[test]
fn statement_names_every_digest_and_is_reproducible() {
    let (plan, spec) = plan();
    let a = build(&plan).expect("build");
    let b = build(&plan).expect("build");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].statement, b[0].statement, "same input, same statement");
    assert_eq!(a[0].manifest.digest, b[0].manifest.digest);
    let new = plan.platforms[0].new.as_ref().expect("new");
    let st: Value = serde_json::from_slice(&a[0].statement).expect("json");
    assert_eq!(
        sha_of(st["subject"].get(0)),
        Some(new.manifest.digest.clone())
    );
    let bd = &st["predicate"]["buildDefinition"];
    let deps = &bd["resolvedDependencies"];
    assert_eq!(
        sha_of(find_named(deps, "manifest")),
        Some(plan.original.digest.clone())
    );
    assert_eq!(
        sha_of(find_named(deps, "/x/multi_connector.py")),
        Some(format!("sha256:{}", "1".repeat(64)))
    );
    assert_eq!(
        sha_of(Some(&bd["externalParameters"]["patches"][0])),
        Some(spec.definition_digest.clone())
    );
    let by = &st["predicate"]["runDetails"]["byproducts"];
    assert_eq!(
        sha_of(find_named(by, "layer")),
        Some(new.layers[0].digest.clone())
    );
    assert_eq!(
        sha_of(find_named(by, "config")),
        Some(new.config_digest.clone())
    );
    assert_eq!(
        sha_of(find_named(by, "/x/multi_connector.py")),
        Some(format!("sha256:{}", "2".repeat(64)))
    );
    let text = String::from_utf8(a[0].statement.clone()).expect("utf8");
    for timey in ["startedOn", "finishedOn", "invocationId"] {
        assert!(!text.contains(timey), "{timey} would make re-runs differ");
    }
    // The artifact: empty config, the statement as its layer, the patched manifest as subject.
    let m = &a[0].manifest.json;
    assert_eq!(m["artifactType"], ARTIFACT_TYPE);
    assert_eq!(m["config"]["digest"], EMPTY_DIGEST);
    assert_eq!(m["layers"][0]["digest"], a[0].statement_digest.as_str());
    assert_eq!(m["layers"][0]["size"], a[0].statement.len());
    assert_eq!(m["subject"]["digest"], new.manifest.digest.as_str());
    assert_eq!(m["subject"]["mediaType"], new.manifest.media_type.as_str());
    let d = a[0].descriptor();
    assert_eq!(d["digest"], a[0].manifest.digest.as_str());
    assert_eq!(d["artifactType"], ARTIFACT_TYPE);
    assert_eq!(d["annotations"], m["annotations"]);
    assert_eq!(
        d["annotations"][ORIGINAL_ANNOTATION],
        plan.original.digest.as_str()
    );
    let pred: Value = serde_json::from_slice(&a[0].predicate().expect("predicate")).expect("json");
    assert_eq!(pred, st["predicate"]);
}

#[test]
fn signature_pairs_cover_top_and_patched_children_once() {
    let (plan, _) = plan();
    // A single-manifest tag: the top is the platform, listed once.
    assert_eq!(
        digest_pairs(&plan),
        [(
            plan.original.digest.clone(),
            plan.new_top.as_ref().map(|d| d.digest.clone())
        )]
    );
}
