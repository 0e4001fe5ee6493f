//! Refusals and bad input: one clear line, a non-zero exit, and nothing pushed.

use serde_json::Value;

use crate::harness::*;

#[test]
fn unpatchable_images_are_refused_and_nothing_is_pushed() {
    let reg = Registry::start();
    reg.seed(&[
        "cuda12.9-vllm0.27.1-noshape",
        "cuda12.9-vllm0.27.1-nofile",
        "cuda12.9-vllm0.27.1-symlink",
        "cann9.0-a3-vllm0.20.2",
    ]);
    let work = tempfile::tempdir().expect("tmp");
    let before = reg.storage();
    for (backend, tag, why) in [
        ("cuda", "cuda12.9-vllm0.27.1-noshape", "unrecognised shape"),
        (
            "cuda",
            "cuda12.9-vllm0.27.1-nofile",
            "no layer holds a visible",
        ),
        ("cuda", "cuda12.9-vllm0.27.1-symlink", "symbolic link"),
        (
            "cann",
            "cann9.0-a3-vllm0.20.2",
            "Ascend path needs its own patch",
        ),
    ] {
        let run = Tool::new("apply")
            .cwd(work.path())
            .backend(backend)
            .repo(reg.repo())
            .tag(tag)
            .json()
            .digest_map("m.json")
            .run();
        assert_eq!(run.code, 1, "{tag}: {}", run.stderr);
        let map = run.json();
        let img = &map["images"][0];
        assert_eq!(img["outcome"], "refused");
        assert_eq!(img["patched_digest"], Value::Null);
        assert!(
            img["reason"].as_str().expect("reason").contains(why),
            "{tag}: {}",
            img["reason"]
        );
        // The reason names the platform and, when there is one, the path.
        assert!(
            img["reason"]
                .as_str()
                .expect("reason")
                .starts_with("linux/"),
            "{}",
            img["reason"]
        );
    }
    assert_eq!(reg.storage(), before, "a refused image pushed something");
}

#[test]
fn bad_input_gets_one_clear_line_and_exit_2() {
    let reg = Registry::start();
    reg.seed(&["rocm7.2-vllm0.25.1"]);
    let work = tempfile::tempdir().expect("tmp");
    let repo = reg.repo();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = l.local_addr().expect("addr");
        drop(l);
        format!("{a}/gpustack/runner")
    };
    let tagged = format!("{repo}:tag");
    let apply = |backend: &str, repo: &str, tag: &str| {
        Tool::new("apply")
            .cwd(work.path())
            .backend(backend)
            .repo(repo)
            .tag(tag)
    };
    let cases = [
        (
            apply("rocm", "Not A Repo!", "rocm7.2-vllm0.25.1"),
            "not a valid repository",
        ),
        (
            apply("tpu", &repo, "rocm7.2-vllm0.25.1"),
            "invalid value 'tpu'",
        ),
        (
            apply("rocm", &repo, "rocm7.2-vllm9.9.9"),
            "rocm7.2-vllm9.9.9",
        ),
        (
            apply("cuda", &repo, "rocm7.2-vllm0.25.1"),
            "is not a cuda tag",
        ),
        (
            apply("rocm", &dead, "rocm7.2-vllm0.25.1"),
            "rocm7.2-vllm0.25.1",
        ),
        (
            apply("rocm", &tagged, "rocm7.2-vllm0.25.1"),
            "names a tag or digest",
        ),
    ];
    let before = reg.storage();
    for (args, needle) in cases {
        let run = args.run();
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(needle),
            "{args:?}: stderr lacks {needle:?}: {}",
            run.stderr
        );
        let errors: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.starts_with("runner-patch: error") || l.starts_with("error:"))
            .collect();
        assert_eq!(
            errors.len(),
            1,
            "{args:?}: expected one error line: {}",
            run.stderr
        );
        assert!(
            !errors.is_empty() && errors.len() <= 2,
            "{args:?}: expected one error line: {}",
            run.stderr
        );
    }
    assert_eq!(reg.storage(), before);
    assert!(
        !work.path().join("runner-patch-manifest.json").exists() || {
            let m: Value = serde_json::from_slice(
                &std::fs::read(work.path().join("runner-patch-manifest.json")).expect("m"),
            )
            .expect("json");
            m["images"].as_array().is_some_and(|a| a.is_empty())
        }
    );
}

#[test]
fn lock_without_requirement_lines_and_bad_requirements_stop_before_any_request() {
    let work = tempfile::tempdir().expect("tmp");
    // Nothing listens on port 1: any request would fail with another message.
    let run = Tool::new("lock")
        .cwd(work.path())
        .backend("cuda")
        .repo("127.0.0.1:1/gpustack/runner")
        .tag("cuda12.9-vllm0.27.1")
        .run();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("no patch of the run has requirement lines to lock"),
        "{}",
        run.stderr
    );
    let dir = work.path().join("reqs");
    std::fs::create_dir(&dir).expect("dir");
    std::fs::write(
        dir.join("patch.toml"),
        "id = \"r\"\nkind = \"wheels\"\ntitle = \"t\"\nrequirements = \"requirements.txt\"\n",
    )
    .expect("toml");
    std::fs::write(dir.join("requirements.txt"), "librosa\n-r more.txt\n").expect("reqs");
    for command in ["plan", "lock"] {
        let run = Tool::new(command)
            .cwd(work.path())
            .backend("cuda")
            .repo("127.0.0.1:1/gpustack/runner")
            .tag("cuda12.9-vllm0.27.1")
            .patch(&dir)
            .run();
        assert_eq!(run.code, 2, "{command}: {}", run.stderr);
        assert!(
            run.stderr
                .contains("requirements.txt:2: -r is an option line"),
            "{command}: {}",
            run.stderr
        );
        assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    }
}
