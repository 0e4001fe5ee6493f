//! Provenance at the registry: the SLSA statement beside each patched platform, read back with
//! plain HTTP through the referrers tag schema and validated with the in-toto-attestation
//! models (tests/support/provenance.py); base annotations; the source's signatures; and
//! `verify` naming each altered field.

use std::process::Command;

use serde_json::Value;

use crate::harness::*;

/// Runs tests/support/provenance.py; returns its JSON answer.
fn prov(reg: &Registry, command: &str, digest: &str, extra: &[&str]) -> Value {
    let out = python("tests.support.provenance")
        .args([
            command,
            "--registry",
            &reg.addr,
            "--repository",
            REPO,
            "--digest",
            digest,
        ])
        .args(extra)
        .output()
        .expect("run tests.support.provenance");
    assert!(
        out.status.success(),
        "provenance.py {command} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("provenance.py json")
}

fn sha(v: &Value) -> String {
    format!("sha256:{}", v["digest"]["sha256"].as_str().expect("sha256"))
}

fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .expect("list")
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no {name:?} in {list}"))
}

#[test]
fn provenance_is_attached_validated_and_agrees_with_registry_and_map() {
    let reg = Registry::start();
    let tag = "cuda12.9-vllm0.27.1";
    let summary = reg.seed(&[tag]);
    let fixture = &summary["images"][tag];
    let original = fixture["digest"].as_str().expect("digest").to_owned();
    let repo = reg.repo();
    // The source carries a cosign-style signature of its own.
    let sig = prov(&reg, "sign", &original, &[]);
    let work = tempfile::tempdir().expect("tmp");

    // plan says what would be attached and which signature the patch leaves behind.
    let plan = Tool::new("plan")
        .cwd(work.path())
        .backend("cuda")
        .repo(&repo)
        .tag(tag)
        .run();
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert_eq!(
        plan.stdout
            .matches("provenance       would attach sha256:")
            .count(),
        2,
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains(&format!(
            "cosign-signature {repo}:{}",
            sig["tag"].as_str().expect("tag")
        )) && plan
            .stdout
            .contains(&format!("covers the original {original}, not the patched")),
        "{}",
        plan.stdout
    );

    let apply = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(&repo)
        .tag(tag)
        .json();
    let run = apply.clone().args(["--provenance-dir", "prov"]).run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let map = run.json();
    let img = &map["images"][0];
    let patched_top = img["patched_digest"].as_str().expect("patched").to_owned();
    assert!(
        run.stderr.contains("covers the original") && run.stderr.contains("not moved or copied"),
        "{}",
        run.stderr
    );

    // The signature is reported as covering the original only, and stays where it was.
    let sigs = img["signatures"].as_array().expect("signatures");
    assert_eq!(sigs.len(), 1, "{img}");
    assert_eq!(sigs[0]["kind"], "cosign-signature");
    assert_eq!(sigs[0]["covers"], original.as_str());
    assert_eq!(sigs[0]["not_covering"], patched_top.as_str());
    assert_eq!(sigs[0]["digest"], sig["digest"]);
    assert_eq!(
        served(&format!("{repo}:{}", sig["tag"].as_str().expect("tag"))),
        sig["digest"].as_str().expect("digest")
    );
    for d in std::iter::once(patched_top.clone()).chain(
        img["platforms"]
            .as_array()
            .expect("platforms")
            .iter()
            .map(|p| p["patched_digest"].as_str().expect("p").to_owned()),
    ) {
        let hex = d.trim_start_matches("sha256:");
        for suffix in ["sig", "att"] {
            let out = Command::new("skopeo")
                .args([
                    "inspect",
                    "--raw",
                    "--tls-verify=false",
                    &format!("docker://{repo}:sha256-{hex}.{suffix}"),
                ])
                .output()
                .expect("skopeo");
            assert!(
                !out.status.success(),
                "a .{suffix} tag appeared for the patched {d}"
            );
        }
    }

    let patch_toml = std::fs::read(root().join("patches/multiconnector-observe/patch.toml"))
        .expect("patch.toml");
    for p in img["platforms"].as_array().expect("platforms") {
        let platform = p["platform"].as_str().expect("platform");
        let arch = platform.split('/').nth(1).expect("arch");
        let patched = p["patched_digest"].as_str().expect("patched");
        let fx = fixture["platforms"]
            .as_object()
            .expect("platforms")
            .iter()
            .find(|(k, _)| k.split('/').nth(1) == Some(arch))
            .map(|(_, v)| v)
            .expect("fixture platform");
        assert_eq!(p["original_digest"], fx["digest"]);

        // Exactly one provenance artifact, found with plain HTTP, valid for in-toto's models.
        let found = prov(&reg, "inspect", patched, &[]);
        let arts = found["artifacts"].as_array().expect("artifacts");
        assert_eq!(arts.len(), 1, "{found}");
        let art = &arts[0];
        assert_eq!(art["manifest"]["subject"]["digest"], patched);
        assert_eq!(
            art["manifest"]["artifactType"],
            "application/vnd.in-toto+json"
        );
        assert_eq!(
            art["descriptor"]["annotations"]["in-toto.io/predicate-type"],
            "https://slsa.dev/provenance/v1"
        );
        let rec = &p["provenance"];
        assert_eq!(rec["digest"], art["digest"], "{p}");
        assert_eq!(rec["statement_digest"], art["statement_digest"]);
        assert_eq!(rec["artifact_type"], "application/vnd.in-toto+json");
        assert_eq!(rec["attached_via"], "referrers-tag");

        // Every digest in the statement is the registry's and the map's.
        let st = &art["statement"];
        assert_eq!(st["_type"], "https://in-toto.io/Statement/v1");
        assert_eq!(sha(&st["subject"][0]), patched);
        let pred = &st["predicate"];
        let bd = &pred["buildDefinition"];
        let deps = &bd["resolvedDependencies"];
        assert_eq!(
            sha(named(deps, "manifest")),
            fx["digest"].as_str().expect("d")
        );
        let file = p["file"].as_str().expect("file");
        assert_eq!(
            sha(named(deps, file)),
            fx["file_sha256"].as_str().expect("f")
        );
        let patches = &bd["externalParameters"]["patches"];
        assert_eq!(patches[0]["id"], map["patch"]);
        assert_eq!(sha(&patches[0]), sha256_hex(&patch_toml));
        let by = &pred["runDetails"]["byproducts"];
        let added = &p["added_layer"];
        assert_eq!(
            sha(named(by, "layer")),
            added["digest"].as_str().expect("l")
        );
        assert_eq!(
            sha(named(by, "config")),
            added["config_digest"].as_str().expect("c")
        );
        let raw = skopeo_raw(&format!("{repo}@{patched}"));
        let manifest: Value = serde_json::from_slice(&raw).expect("json");
        let layers = manifest["layers"].as_array().expect("layers");
        assert_eq!(layers[layers.len() - 1]["digest"], added["digest"]);
        // What this platform pushes: layer, config, manifest, and the artifact (statement,
        // artifact manifest, the 2-byte empty config).
        let n = |v: &Value| v.as_u64().expect("size");
        assert_eq!(
            n(&p["bytes_to_push"]),
            n(&added["size"])
                + n(&manifest["config"]["size"])
                + raw.len() as u64
                + n(&art["manifest"]["layers"][0]["size"])
                + n(&art["descriptor"]["size"])
                + 2,
            "{p}"
        );
        assert_eq!(manifest["config"]["digest"], added["config_digest"]);
        let (rootfs, _) = unpack(&format!("{repo}@{patched}"), arch, &work.path().join(arch));
        let content = std::fs::read(rootfs.join(file.trim_start_matches('/'))).expect("file");
        assert_eq!(sha(named(by, file)), sha256_hex(&content));
        assert!(pred["runDetails"]["builder"]["id"]
            .as_str()
            .expect("id")
            .contains("runner-patch@"));

        // Base annotations on the OCI manifest only; the Docker v2 manifest has none.
        if manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json" {
            let ann = &manifest["annotations"];
            assert_eq!(
                ann["org.opencontainers.image.base.name"],
                format!("{repo}:{tag}")
            );
            assert_eq!(ann["org.opencontainers.image.base.digest"], fx["digest"]);
        } else {
            assert_eq!(
                manifest["mediaType"],
                "application/vnd.docker.distribution.manifest.v2+json"
            );
            assert!(manifest.get("annotations").is_none(), "{manifest}");
        }

        // The statement written for signing is the one attached.
        let hex = patched.trim_start_matches("sha256:");
        let written: Value = serde_json::from_slice(
            &std::fs::read(work.path().join(format!("prov/sha256-{hex}.intoto.json")))
                .expect("statement file"),
        )
        .expect("json");
        assert_eq!(&written, st);
        let predicate: Value = serde_json::from_slice(
            &std::fs::read(
                work.path()
                    .join(format!("prov/sha256-{hex}.predicate.json")),
            )
            .expect("predicate file"),
        )
        .expect("json");
        assert_eq!(&predicate, pred);
    }
    let on_map = |command: &str| {
        Tool::new(command)
            .cwd(work.path())
            .digest_map("runner-patch-manifest.json")
            .run()
    };
    let verify = on_map("verify");
    assert_eq!(verify.code, 0, "{}{}", verify.stdout, verify.stderr);
    // From the registry alone (no map): which original and which patch made each platform.
    let by_digest = Tool::new("verify")
        .cwd(work.path())
        .arg(format!("{repo}@{patched_top}"))
        .run();
    assert_eq!(by_digest.code, 0, "{}", by_digest.stdout);
    for p in img["platforms"].as_array().expect("platforms") {
        let line = format!(
            "made from {repo}@{} + patch multiconnector-observe",
            p["original_digest"].as_str().expect("o")
        );
        assert!(
            by_digest.stdout.contains(&line),
            "{line} not in {}",
            by_digest.stdout
        );
    }

    // A re-run attaches nothing new; rollback leaves the record and says so.
    let before = reg.storage();
    let again = apply.digest_map("again.json").run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(reg.storage(), before, "re-run wrote to the registry");
    let back = on_map("rollback");
    assert_eq!(back.code, 0, "{}", back.stderr);
    assert_eq!(
        back.stdout.matches("provenance kept").count(),
        2,
        "{}",
        back.stdout
    );
    assert_eq!(served(&format!("{repo}:{tag}")), original);
    for p in img["platforms"].as_array().expect("platforms") {
        let found = prov(
            &reg,
            "inspect",
            p["patched_digest"].as_str().expect("p"),
            &[],
        );
        assert_eq!(found["artifacts"].as_array().expect("a").len(), 1);
    }
}

#[test]
fn verify_names_each_altered_provenance_field() {
    let reg = Registry::start();
    let tag = "cuda12.8-vllm0.27.1";
    reg.seed(&[tag]);
    let work = tempfile::tempdir().expect("tmp");
    let apply = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tag(tag)
        .json();
    let run = apply.run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let map = run.json();
    let patched = map["images"][0]["platforms"][0]["patched_digest"]
        .as_str()
        .expect("patched")
        .to_owned();
    let by_ref = format!("{}:{tag}", reg.repo());
    let verify = Tool::new("verify").cwd(work.path());
    let verifies = [
        verify.clone().digest_map("runner-patch-manifest.json"),
        verify.clone().arg(&by_ref),
    ];
    for v in &verifies {
        let ok = v.run();
        assert_eq!(ok.code, 0, "{}{}", ok.stdout, ok.stderr);
    }
    for (how, field) in [
        ("subject", "subject digest"),
        ("original", "original digest"),
        ("layer", "layer digest"),
        ("missing", "no statement is attached"),
    ] {
        let altered = prov(&reg, "alter", &patched, &["--how", how]);
        for tool in &verifies {
            let v = tool.run();
            assert_eq!(v.code, 1, "{how}: {tool:?}: {}{}", v.stdout, v.stderr);
            assert!(
                v.stdout
                    .lines()
                    .any(|l| l.contains("provenance") && l.contains(field)),
                "{how}: {tool:?}: no provenance problem naming {field:?} in {}",
                v.stdout
            );
        }
        prov(
            &reg,
            "restore",
            &patched,
            &["--index", altered["previous"].as_str().expect("previous")],
        );
        let ok = verifies[0].run();
        assert_eq!(ok.code, 0, "after restoring {how}: {}", ok.stdout);
    }

    // Published as it is under another repository: the record goes with the image.
    let mirror = format!("{}/mirror/runner", reg.addr);
    let again = apply.target_repo(&mirror).digest_map("mirror.json").run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.json()["images"][0]["outcome"], "already-patched");
    let v = verify.arg(format!("{mirror}:{tag}")).run();
    assert_eq!(v.code, 0, "{}", v.stdout);
    assert!(v.stdout.contains("made from"), "{}", v.stdout);
}

#[test]
fn no_provenance_attaches_nothing() {
    let reg = Registry::start();
    let tag = "cuda12.8-vllm0.27.1";
    reg.seed(&[tag]);
    let work = tempfile::tempdir().expect("tmp");
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tag(tag)
        .json()
        .arg("--no-provenance")
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let map = run.json();
    let p = &map["images"][0]["platforms"][0];
    assert!(p.get("provenance").is_none(), "{p}");
    let found = prov(
        &reg,
        "inspect",
        p["patched_digest"].as_str().expect("p"),
        &[],
    );
    assert!(found["index"].is_null(), "{found}");
    let verify = Tool::new("verify").cwd(work.path());
    let v = verify
        .clone()
        .digest_map("runner-patch-manifest.json")
        .run();
    assert_eq!(v.code, 0, "{}", v.stdout);
    let by_ref = format!("{}:{tag}", reg.repo());
    let v = verify.clone().arg(&by_ref).run();
    assert_eq!(v.code, 1, "{}", v.stdout);
    assert!(
        v.stdout.contains("no statement is attached"),
        "{}",
        v.stdout
    );
    let v = verify.arg("--no-provenance").arg(&by_ref).run();
    assert_eq!(v.code, 0, "{}", v.stdout);
}

#[test]
fn a_registry_that_processes_subject_gets_no_referrers_tag() {
    let reg = Registry::start();
    let tag = "cuda12.8-vllm0.27.1";
    reg.seed(&[tag]);
    let work = tempfile::tempdir().expect("tmp");
    let plan_path = work.path().join("plan.json");
    std::fs::write(&plan_path, "[]").expect("plan");
    let proxy = Daemon::start(
        "fault_proxy",
        &[
            "--upstream",
            &reg.addr,
            "--plan",
            plan_path.to_str().expect("utf8"),
        ],
    );
    let via = format!("{}/{REPO}", proxy.addr());
    let through_proxy = |command: &str| {
        Tool::new(command)
            .cwd(work.path())
            .backend("cuda")
            .repo(&via)
            .tag(tag)
            .json()
            .run()
    };
    // The artifact and its subject are final in a plan (through the same name: base.name).
    let plan = through_proxy("plan");
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let p = &plan.json()["images"][0]["platforms"][0];
    let artifact = p["provenance"]["digest"]
        .as_str()
        .expect("artifact")
        .to_owned();
    let subject = p["patched_digest"].as_str().expect("subject").to_owned();
    // The proxy answers the artifact's PUT as a registry that processes `subject` does.
    std::fs::write(
        &plan_path,
        serde_json::json!([{
            "match": {"method": "PUT", "path_regex": format!("/manifests/{artifact}$")},
            "fault": {"kind": "add_header", "name": "OCI-Subject", "value": subject},
        }])
        .to_string(),
    )
    .expect("plan");
    let run = through_proxy("apply");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rec = &run.json()["images"][0]["platforms"][0]["provenance"];
    assert_eq!(rec["digest"], artifact.as_str());
    assert_eq!(rec["attached_via"], "referrers-api", "{rec}");
    // The artifact is there, with its subject; no referrers tag was written beside it.
    let art: Value =
        serde_json::from_slice(&skopeo_raw(&format!("{}@{artifact}", reg.repo()))).expect("json");
    assert_eq!(art["subject"]["digest"], subject.as_str());
    assert!(prov(&reg, "inspect", &subject, &[])["index"].is_null());
}

/// Eight tags holding one image share each patched platform manifest, so every tag's provenance
/// artifact attaches to the same subjects. On a registry without the referrers API the
/// referrers tag is read, extended and written back: with `--jobs 8` every attach must still
/// land, each tag's statement listed, and `verify` must find them all.
#[test]
fn tags_sharing_patched_manifests_keep_every_statement_with_jobs() {
    let reg = Registry::start();
    let source = "cuda12.9-vllm0.27.1";
    reg.seed(&[source]);
    let tags: Vec<String> = (1..=8).map(|i| format!("cuda12.9-vllm0.27.{i}")).collect();
    for t in tags.iter().filter(|t| t.as_str() != source) {
        retag(&reg, source, t);
    }
    let work = tempfile::tempdir().expect("tmp");
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tags(&tags)
        .args(["--jobs", "8"])
        .digest_map("map.json")
        .json()
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let map = run.json();
    // Which tags each patched manifest serves: the Docker-typed amd64 one is shared by all
    // eight; the OCI-typed arm64 one names its tag (`org.opencontainers.image.base.name`).
    let mut serves: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for img in map["images"].as_array().expect("images") {
        assert_eq!(img["outcome"], "patched", "{img}");
        let tag = img["source"]
            .as_str()
            .expect("source")
            .rsplit(':')
            .next()
            .expect("tag");
        for p in img["platforms"].as_array().expect("platforms") {
            let d = p["patched_digest"].as_str().expect("patched").to_owned();
            serves.entry(d).or_default().push(tag.to_owned());
        }
    }
    assert!(
        serves.values().any(|t| t.len() == tags.len()),
        "no patched manifest is shared by every tag: {serves:?}"
    );
    for (subject, want) in &mut serves {
        want.sort();
        let found = prov(&reg, "inspect", subject, &[]);
        let arts = found["artifacts"].as_array().expect("artifacts");
        let mut named: Vec<String> = arts
            .iter()
            .map(|a| {
                a["statement"]["subject"][0]["annotations"]["tag"]
                    .as_str()
                    .expect("tag")
                    .to_owned()
            })
            .collect();
        named.sort();
        assert_eq!(
            &named, want,
            "the referrers of {subject} lost a tag's statement"
        );
    }
    let verify = Tool::new("verify")
        .cwd(work.path())
        .digest_map("map.json")
        .run();
    assert_eq!(verify.code, 0, "{}\n{}", verify.stdout, verify.stderr);
}
