//! The release-pipeline commands: discovery, companion tags, plan, verify and rollback.

use serde_json::Value;

use crate::harness::*;

fn sources(map: &Value) -> Vec<String> {
    let mut v: Vec<String> = map["images"]
        .as_array()
        .expect("images")
        .iter()
        .map(|i| {
            i["source"]
                .as_str()
                .expect("source")
                .rsplit(':')
                .next()
                .expect("tag")
                .to_owned()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn discovery_plan_apply_verify_rollback() {
    let reg = Registry::start();
    let summary = reg.seed(&[
        "cuda12.9-vllm0.27.1",
        "cuda13.0-vllm0.30.0",
        "cuda13.0-vllm0.33.0",
        "rocm7.2-vllm0.25.1",
    ]);
    // Tags discovery must leave alone: older and newer releases, -dev, another service, another
    // backend (the per-platform companions come from the fixture).
    retag(&reg, "cuda13.0-vllm0.33.0", "cuda12.9-vllm0.10.2");
    retag(&reg, "cuda13.0-vllm0.33.0", "cuda12.9-vllm0.34.0");
    retag(&reg, "cuda12.9-vllm0.27.1", "cuda12.9-vllm0.27.1-dev");
    retag(&reg, "cuda12.9-vllm0.27.1", "cuda12.9-sglang0.5.1");
    let work = tempfile::tempdir().expect("tmp");
    let repo = reg.repo();

    // plan: exactly the affected multi-arch tags of the backend; nothing written anywhere.
    let before = reg.storage();
    let plan_all = Tool::new("plan")
        .cwd(work.path())
        .backend("cuda")
        .repo(&repo)
        .json();
    let plan = plan_all.run();
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let planned = plan.json();
    assert_eq!(
        sources(&planned),
        ["cuda12.9-vllm0.27.1", "cuda13.0-vllm0.30.0"]
    );
    let img = &planned["images"][0];
    assert!(img["bytes_to_push"].as_u64().expect("bytes") > 0);
    for p in img["platforms"].as_array().expect("platforms") {
        assert_eq!(p["outcome"], "patched");
        assert!(p["bytes_scanned"].as_u64().expect("scan") > 0);
        assert!(p["vllm_version"].is_string() && p["file"].is_string());
    }
    assert_eq!(
        img["companions"].as_array().expect("companions").len(),
        2,
        "{img}"
    );
    assert_eq!(reg.storage(), before, "plan wrote to the registry");
    assert!(!work.path().join("runner-patch-manifest.json").exists());
    let dev = plan_all.arg("--include-dev").run();
    assert_eq!(
        sources(&dev.json()),
        [
            "cuda12.9-vllm0.27.1",
            "cuda12.9-vllm0.27.1-dev",
            "cuda13.0-vllm0.30.0"
        ]
    );

    // apply: companions follow their children; output carries no terminal control characters.
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(&repo)
        .args(["--jobs", "2"])
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    for out in [&run.stdout, &run.stderr] {
        assert!(
            !out.contains('\u{1b}') && !out.contains('\r'),
            "control characters in non-terminal output: {out:?}"
        );
    }
    assert!(
        run.stdout.contains("cuda12.9-vllm0.27.1") && run.stdout.contains("patched"),
        "{}",
        run.stdout
    );
    let map: Value = serde_json::from_slice(
        &std::fs::read(work.path().join("runner-patch-manifest.json")).expect("map"),
    )
    .expect("json");
    assert_eq!(
        sources(&map),
        ["cuda12.9-vllm0.27.1", "cuda13.0-vllm0.30.0"]
    );
    let img = map["images"]
        .as_array()
        .expect("images")
        .iter()
        .find(|i| {
            i["source"]
                .as_str()
                .expect("s")
                .ends_with(":cuda12.9-vllm0.27.1")
        })
        .expect("image")
        .clone();
    for c in img["companions"].as_array().expect("companions") {
        assert_eq!(c["moved"], true);
        let plat = img["platforms"]
            .as_array()
            .expect("p")
            .iter()
            .find(|p| p["platform"] == c["platform"])
            .expect("platform");
        assert_eq!(c["patched_digest"], plat["patched_digest"]);
        assert_eq!(c["original_digest"], plat["original_digest"]);
        assert_eq!(
            served(c["target"].as_str().expect("t")),
            c["patched_digest"].as_str().expect("d")
        );
    }
    for t in [
        "cuda12.9-vllm0.27.1-dev",
        "cuda12.9-sglang0.5.1",
        "cuda12.9-vllm0.34.0",
        "rocm7.2-vllm0.25.1",
    ] {
        let fixture = match t {
            "cuda12.9-vllm0.27.1-dev" | "cuda12.9-sglang0.5.1" => "cuda12.9-vllm0.27.1",
            "cuda12.9-vllm0.34.0" => "cuda13.0-vllm0.33.0",
            other => other,
        };
        assert_eq!(
            served(&format!("{repo}:{t}")),
            summary["images"][fixture]["digest"].as_str().expect("d"),
            "{t} was touched"
        );
    }

    // verify: passes on what apply made.
    let on_map = |command: &str| {
        Tool::new(command)
            .cwd(work.path())
            .digest_map("runner-patch-manifest.json")
            .run()
    };
    let verify_ref = |reference: String| Tool::new("verify").cwd(work.path()).arg(reference).run();
    let ok = on_map("verify");
    assert_eq!(ok.code, 0, "{}{}", ok.stdout, ok.stderr);
    let by_ref = verify_ref(format!("{repo}:cuda12.9-vllm0.27.1"));
    assert_eq!(by_ref.code, 0, "{}{}", by_ref.stdout, by_ref.stderr);
    // ... and fails on an unpatched image, naming why.
    let unpatched = verify_ref(format!("{repo}:cuda12.9-vllm0.27.1-dev"));
    assert_eq!(unpatched.code, 1, "{}", unpatched.stdout);
    assert!(
        unpatched.stdout.contains("FAIL") && unpatched.stdout.contains("not the patched shape"),
        "{}",
        unpatched.stdout
    );

    // rollback: every tag the map moved is back on its original digest, exactly.
    let rb = on_map("rollback");
    assert_eq!(rb.code, 0, "{}", rb.stderr);
    assert!(rb.stdout.contains("restored"), "{}", rb.stdout);
    for i in map["images"].as_array().expect("images") {
        assert_eq!(
            served(i["source"].as_str().expect("s")),
            i["original_digest"].as_str().expect("d")
        );
        for c in i["companions"].as_array().into_iter().flatten() {
            assert_eq!(
                served(c["target"].as_str().expect("t")),
                c["original_digest"].as_str().expect("d")
            );
        }
    }
    // A second rollback moves nothing; verify now reports the tags are not patched.
    let rb2 = on_map("rollback");
    assert_eq!(rb2.code, 0);
    assert!(
        !rb2.stdout.contains("restored") && rb2.stdout.contains("already original"),
        "{}",
        rb2.stdout
    );
    let after = on_map("verify");
    assert_eq!(after.code, 1);
    assert!(
        after.stdout.contains("not at the patched"),
        "{}",
        after.stdout
    );
}

#[test]
fn verify_names_each_alteration() {
    let reg = Registry::start();
    reg.seed(&["cuda12.9-vllm0.27.1"]);
    let work = tempfile::tempdir().expect("tmp");
    let tag = "cuda12.9-vllm0.27.1";
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tag(tag)
        .json()
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let map = run.json();
    for (how, expect) in [
        ("file-unpatched", "is not the patched shape"),
        ("pyc-visible", "stale bytecode"),
        ("marker-altered", "altered"),
        ("layer-swapped", "differs from the original"),
        ("layer-replaced", "differs from the original"),
        ("layer-dropped", "but the original has"),
        ("config-extra", "beyond the patch at config.config.Env"),
        ("history-extra", "last history entry"),
        ("label-missing", "does not name"),
    ] {
        let out_tag = format!("{tag}-alt-{how}");
        let alt = alter(&reg, tag, how, &out_tag);
        // A map that claims the altered image is the patched one.
        let mut m = map.clone();
        let img = &mut m["images"][0];
        img["target"] = Value::from(format!("{}:{out_tag}", reg.repo()));
        img["patched_digest"] = alt["digest"].clone();
        img["companions"] = Value::Array(Vec::new());
        let altered_platform = alt["platform"].as_str().expect("platform").to_owned();
        for p in img["platforms"].as_array_mut().expect("platforms") {
            if p["platform"]
                .as_str()
                .is_some_and(|x| x == altered_platform)
            {
                p["patched_digest"] = alt["platform_digest"].clone();
            }
        }
        let path = work.path().join(format!("{how}.json"));
        std::fs::write(&path, serde_json::to_vec(&m).expect("json")).expect("write");
        let v = Tool::new("verify").cwd(work.path()).digest_map(&path).run();
        assert_eq!(
            v.code, 1,
            "{how}: verify passed an altered image:\n{}{}",
            v.stdout, v.stderr
        );
        assert!(
            v.stdout.contains(expect),
            "{how}: expected {expect:?} in:\n{}",
            v.stdout
        );
        // The untouched platform still verifies.
        assert!(v.stdout.contains("ok   linux/"), "{how}: {}", v.stdout);
    }
}
