//! The file-level kinds beyond a Python package: a `files` patch, a `diff` with a `root` and an
//! `env` patch extending list variables, stacked with the built-in fix on every platform of the
//! fixture image; `plan` shows what each would do and writes nothing; a folder whose paths
//! contradict each other stops the run before any request. (Links, containerd and the runner
//! project's own operations: tests/proof/test_post_operations.py.)

use std::path::Path;

use crate::harness::{root, run_tool, skopeo_config, tar_list, unpack, Registry, Tool};

const TAG: &str = "cuda12.9-vllm0.27.1";

fn folder(dir: &Path, name: &str, files: &[(&str, &str)]) -> String {
    let f = dir.join(name);
    std::fs::create_dir_all(&f).expect("mkdir");
    for (file, text) in files {
        std::fs::write(f.join(file), text).expect("write");
    }
    f.display().to_string()
}

/// A `files` patch placing a conf file, a `diff` relative to /etc/gpustack, a list `env` patch.
fn patches(dir: &Path) -> [String; 3] {
    let files = folder(
        dir,
        "conf",
        &[
            (
                "patch.toml",
                "id = \"extra-conf\"\nkind = \"files\"\ntitle = \"t\"\n[[files]]\npath = \"/etc/gpustack/extra.conf\"\nsource = \"extra.conf\"\nmode = 0o640\ngid = 1000\n",
            ),
            ("extra.conf", "limit = 1\n"),
        ],
    );
    let diff = folder(
        dir,
        "yaml",
        &[
            (
                "patch.toml",
                "id = \"runner-yaml\"\nkind = \"diff\"\ntitle = \"t\"\nroot = \"/etc/gpustack\"\ndiff = \"fix.patch\"\n",
            ),
            (
                "fix.patch",
                "--- a/runner.yaml\n+++ b/runner.yaml\n@@ -1,3 +1,4 @@\n backend: cuda\n service: vllm\n version: 0.27.1\n+patched: true\n",
            ),
        ],
    );
    let env = folder(
        dir,
        "env",
        &[(
            "patch.toml",
            "id = \"opt-path\"\nkind = \"env\"\ntitle = \"t\"\n[env]\nprepend = { PATH = \"/opt/x/bin:/usr/bin\" }\nappend = { LD_LIBRARY_PATH = \"/opt/x/lib\" }\n",
        )],
    );
    [files, diff, env]
}

#[test]
fn files_root_diff_and_list_env_stack_with_the_built_in_fix() {
    let reg = Registry::start();
    reg.seed(&[TAG]);
    let work = tempfile::tempdir().expect("tmp");
    let reference = format!("{}:{TAG}", reg.repo());
    let [files, diff, env] = patches(work.path());
    let base = |cmd: &str| {
        [files.as_str(), diff.as_str(), env.as_str()].iter().fold(
            Tool::new(cmd)
                .cwd(work.path())
                .backend("cuda")
                .repo(reg.repo())
                .tag(TAG)
                .patch("multiconnector-observe"),
            |t, p| t.patch(p),
        )
    };

    // plan: what each would do, nothing written.
    let before = reg.storage();
    let plan = base("plan").run();
    assert_eq!(plan.code, 0, "{}\n{}", plan.stdout, plan.stderr);
    for says in [
        "/etc/gpustack/extra.conf: created (mode 0640, owner 0:1000)",
        "/etc/gpustack: 1 file(s) patched",
        "PATH: /opt/x/bin prepended, /usr/bin moved to the front",
        "LD_LIBRARY_PATH: /opt/x/lib appended",
    ] {
        assert!(
            plan.stdout.contains(says),
            "plan says {says:?}: {}",
            plan.stdout
        );
    }
    assert_eq!(reg.storage(), before, "plan writes nothing");

    let run = base("apply").json().run();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let map = run.json();
    for p in map["images"][0]["platforms"].as_array().expect("platforms") {
        let outcomes: Vec<&str> = p["patches"]
            .as_array()
            .expect("patches")
            .iter()
            .map(|s| s["outcome"].as_str().expect("outcome"))
            .collect();
        assert_eq!(outcomes, ["patched"; 4], "{p}");
    }
    // What umoci unpacks, and the new layers as GNU tar lists them.
    let (rootfs, layout) = unpack(&reference, "amd64", &work.path().join("patched"));
    let conf = rootfs.join("etc/gpustack/extra.conf");
    assert_eq!(std::fs::read_to_string(&conf).expect("conf"), "limit = 1\n");
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(&conf).expect("stat");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
    let yaml = std::fs::read_to_string(rootfs.join("etc/gpustack/runner.yaml")).expect("yaml");
    assert!(yaml.ends_with("version: 0.27.1\npatched: true\n"), "{yaml}");
    let manifest_blobs = layout.join("blobs/sha256");
    let listed: Vec<String> = std::fs::read_dir(&manifest_blobs)
        .expect("blobs")
        .flatten()
        .filter(|e| e.metadata().map(|m| m.len() < 4096).unwrap_or(false))
        .filter_map(|e| {
            let out = std::process::Command::new("tar")
                .arg("-tvzf")
                .arg(e.path())
                .output()
                .ok()?;
            out.status.success().then(|| tar_list(&e.path()))
        })
        .collect();
    assert!(
        listed
            .iter()
            .any(|l| l.contains("0/1000") && l.contains("etc/gpustack/extra.conf")),
        "GNU tar lists the placed file with its owner: {listed:?}"
    );
    let config = skopeo_config(&reference);
    let env_list: Vec<&str> = config["config"]["Env"]
        .as_array()
        .expect("Env")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    // The judge of the lookup order: what /bin/sh makes of the operation's `ENV` line on the
    // original PATH, later duplicates dropped.
    let original = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    let sh = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            "PATH=\"/opt/x/bin:/usr/bin:$0\"; printf %s \"$PATH\"",
            original,
        ])
        .output()
        .expect("sh");
    let mut want: Vec<String> = Vec::new();
    for e in String::from_utf8_lossy(&sh.stdout).split(':') {
        if !want.iter().any(|w| w == e) {
            want.push(e.to_owned());
        }
    }
    let want = format!("PATH={}", want.join(":"));
    assert!(
        env_list.contains(&want.as_str()),
        "the prepended entries lead in their order, each once: {env_list:?}, want {want}"
    );
    assert!(
        env_list.contains(&"LD_LIBRARY_PATH=/opt/x/lib"),
        "{env_list:?}"
    );
    let map_path = work.path().join("runner-patch-manifest.json");
    let verify = [
        "multiconnector-observe",
        files.as_str(),
        diff.as_str(),
        env.as_str(),
    ]
    .iter()
    .fold(
        Tool::new("verify").cwd(work.path()).digest_map(&map_path),
        |t, p| t.patch(p),
    )
    .run();
    assert_eq!(verify.code, 0, "{}\n{}", verify.stdout, verify.stderr);
    let again = base("apply").json().run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.json()["images"][0]["outcome"], "already-patched");
    let rb = Tool::new("rollback")
        .cwd(work.path())
        .digest_map(&map_path)
        .run();
    assert_eq!(rb.code, 0, "{}\n{}", rb.stdout, rb.stderr);
    let raw = run_tool(
        "skopeo",
        &[
            "inspect",
            "--raw",
            "--tls-verify=false",
            &format!("docker://{reference}"),
        ],
    );
    assert_eq!(
        crate::harness::sha256_hex(&raw),
        map["images"][0]["original_digest"]
            .as_str()
            .expect("original")
    );
}

#[test]
fn contradicting_paths_stop_the_run_before_any_request() {
    let reg = Registry::start();
    let work = tempfile::tempdir().expect("tmp");
    let bad = folder(
        work.path(),
        "bad",
        &[
            (
                "patch.toml",
                "id = \"bad\"\nkind = \"files\"\ntitle = \"t\"\ndelete = [\"/opt/app\"]\n[[files]]\npath = \"/opt/app/conf.json\"\nsource = \"conf.json\"\nmode = 0o644\n",
            ),
            ("conf.json", "{}\n"),
        ],
    );
    let before = reg.log().len();
    let run = Tool::new("apply")
        .cwd(work.path())
        .backend("cuda")
        .repo(reg.repo())
        .tag(TAG)
        .patch(&bad)
        .run();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("{bad}/patch.toml:5: /opt/app/conf.json lies below /opt/app, which the patch also names")),
        "{}",
        run.stderr
    );
    assert_eq!(reg.log().len(), before, "no request reached the registry");
    // The examples whose only inputs are written here load as they are; those whose inputs are
    // the runner project's files (put in place by a maintainer, never kept here) refuse without
    // them, in one line that names the missing file.
    let examples = root().join("examples/post-operations");
    let mut listed = Tool::new("patches").cwd(work.path()).json();
    for name in [
        "20251224_mindie_patch_atb_config",
        "20260605_vllm_patch_dp_port",
        "20260203_sglang_disable_cudnn_check",
        "20251214_cuda_several_patches",
        "20251215_cann_several_patches",
    ] {
        listed = listed.patch(examples.join(name));
    }
    let listed = listed.run();
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    for (name, input) in [
        (
            "20251201_vllm_patch_qwen2_5_vl",
            "vllm_001_disable_flashatten_in_qwen2_5_vl.patch",
        ),
        ("20260129_vllm_patch_dp", "vllm_001_wrong_dp_ray.patch"),
        (
            "20251213_sglang_patch_server_args",
            "sglang_001_fix_server_args.patch",
        ),
        ("20260214_sglang_patch_zimage", "001_patch_image.patch"),
        ("20251103_mindie_refresh_entrypoint", "mindieservice_daemon"),
        ("20251105_vllm_polish_nvidia_hpcx", "hpcx.conf"),
        (
            "20251213_mindie_patch_minicpm_qwen2_v2/1-resampler",
            "resampler.py",
        ),
        (
            "20251213_mindie_patch_minicpm_qwen2_v2/2-atb-models",
            "minicpm_qwen2_v2.patch",
        ),
    ] {
        // The patch.toml alone, so a maintainer's downloaded copy does not change the answer.
        let folder = work.path().join("examples").join(name);
        std::fs::create_dir_all(&folder).expect("mkdir");
        std::fs::copy(
            examples.join(name).join("patch.toml"),
            folder.join("patch.toml"),
        )
        .expect("copy patch.toml");
        let missing = Tool::new("patches").cwd(work.path()).patch(&folder).run();
        assert_eq!(missing.code, 2, "{name}: {}", missing.stderr);
        let lines: Vec<&str> = missing.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{name}: {}", missing.stderr);
        assert!(
            lines[0].contains(&format!("{}/patch.toml:", folder.display()))
                && lines[0].contains(&format!("{}/{input}: No such file", folder.display())),
            "{name}: {}",
            missing.stderr
        );
    }
}
