use super::*;

fn load(text: &str, origin: &str) -> Result<EnvPatch, String> {
    EnvPatch::load(&Source {
        text,
        origin,
        folder: None,
    })
    .map_err(|e| e.to_string())
}

fn patch() -> EnvPatch {
    load(
        "id = \"nccl-env\"\nkind = \"env\"\ntitle = \"NCCL settings\"\n[env]\nset = { NCCL_P2P_DISABLE = \"1\", PATH = \"/opt/bin:/usr/bin\" }\nunset = [\"OLD\"]\n",
        "nccl-env/patch.toml",
    )
    .expect("loads")
}

const CONFIG: &str = r#"{"architecture":"amd64","config":{"User":"0","Env":["PATH=/usr/bin","OLD=x","KEEP=1=2"],"Labels":{"a":"b"}},"container_config":{"Env":["PATH=/usr/bin"]},"history":[{"created_by":"RUN x"}],"os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:00"]}}"#;

#[test]
fn edits_env_keeps_order_and_unknown_fields() {
    let config: Value = serde_json::from_str(CONFIG).expect("json");
    let new = patch()
        .edit_config(&config)
        .expect("edits")
        .expect("changed");
    assert_eq!(
        new["config"]["Env"],
        json!(["PATH=/opt/bin:/usr/bin", "KEEP=1=2", "NCCL_P2P_DISABLE=1"])
    );
    let keys: Vec<&String> = new.as_object().expect("object").keys().collect();
    assert_eq!(
        keys,
        [
            "architecture",
            "config",
            "container_config",
            "history",
            "os",
            "rootfs"
        ]
    );
    assert_eq!(new["container_config"]["Env"], json!(["PATH=/usr/bin"]));
    assert_eq!(new["rootfs"]["diff_ids"], json!(["sha256:00"]), "no layer");
    let last = &new["history"][1];
    assert_eq!(last["empty_layer"], json!(true));
    assert!(last["created_by"]
        .as_str()
        .is_some_and(|s| s.starts_with("runner-patch: nccl-env")));
    assert_eq!(
        patch().edit_config(&new).expect("edits"),
        None,
        "re-run: nothing to do"
    );
}

#[test]
fn no_env_at_all_is_created() {
    let config = json!({"config": null, "rootfs": {"diff_ids": []}});
    let new = patch()
        .edit_config(&config)
        .expect("edits")
        .expect("changed");
    assert_eq!(
        new["config"]["Env"],
        json!(["NCCL_P2P_DISABLE=1", "PATH=/opt/bin:/usr/bin"])
    );
    assert_eq!(new["history"][0]["empty_layer"], json!(true));
}

#[test]
fn bad_env_sections_name_their_line() {
    let e = load(
        "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\n[env]\nset = { A = \"1\" }\nunset = [\"A\"]\n",
        "e/patch.toml",
    )
    .expect_err("set and unset");
    assert!(
        e.starts_with("e/patch.toml:4: [env]: A is both set and unset"),
        "{e}"
    );
    let e = load(
        "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\n[env]\nset = { A = 1 }\n",
        "e/patch.toml",
    )
    .expect_err("not a string");
    assert!(e.starts_with("e/patch.toml:5: "), "{e}");
    let e = load(
        "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\nshape = 1\n[env]\nset = { A = \"1\" }\n",
        "e/patch.toml",
    )
    .expect_err("unknown field");
    assert!(e.starts_with("e/patch.toml:4: "), "{e}");
}

#[test]
fn lists_are_extended_once_and_shown() {
    let p = load(
        "id = \"bishengir\"\nkind = \"env\"\ntitle = \"t\"\n[env]\nprepend = { PATH = \"/usr/local/Ascend/ascend-toolkit/latest/bisheng_toolkit/bishengir/bin\" }\nappend = { LD_LIBRARY_PATH = \"/opt/x/lib\" }\n",
        "b/patch.toml",
    )
    .expect("loads");
    let config: Value = serde_json::from_str(CONFIG).expect("json");
    let (new, notes) = p.edit(&config).expect("edits").expect("changed");
    assert_eq!(
        new["config"]["Env"],
        json!([
            "PATH=/usr/local/Ascend/ascend-toolkit/latest/bisheng_toolkit/bishengir/bin:/usr/bin",
            "OLD=x",
            "KEEP=1=2",
            "LD_LIBRARY_PATH=/opt/x/lib"
        ])
    );
    assert_eq!(
        notes,
        [
            "LD_LIBRARY_PATH: /opt/x/lib appended",
            "PATH: /usr/local/Ascend/ascend-toolkit/latest/bisheng_toolkit/bishengir/bin prepended"
        ]
    );
    assert_eq!(
        new["history"][1]["created_by"],
        "runner-patch: bishengir (ENV LD_LIBRARY_PATH=${LD_LIBRARY_PATH}:/opt/x/lib PATH=/usr/local/Ascend/ascend-toolkit/latest/bisheng_toolkit/bishengir/bin:${PATH})"
    );
    assert_eq!(
        p.edit(&new).expect("edits"),
        None,
        "a second run adds nothing"
    );
    let v = p.decide(&crate::patch::tree::mem::Mem(Default::default(), None));
    assert_eq!(
        v.outcome,
        crate::patch::Outcome::Refused,
        "no config: {}",
        v.reason
    );
    // A variable listed twice is refused rather than guessed at.
    let twice = json!({"config": {"Env": ["PATH=/a", "PATH=/b"]}});
    let e = p.edit(&twice).expect_err("twice");
    assert!(e.contains("lists PATH 2 times"), "{e}");
}

#[test]
fn list_sections_are_checked() {
    let e = load(
        "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\n[env]\nset = { PATH = \"/x\" }\nprepend = { PATH = \"/y\" }\n",
        "e/patch.toml",
    )
    .expect_err("both");
    assert!(
        e.starts_with("e/patch.toml:4: [env]: PATH is both a list to extend and set or unset"),
        "{e}"
    );
    let e = load(
        "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\n[env]\nappend = { PATH = \"/x:\" }\n",
        "e/patch.toml",
    )
    .expect_err("empty entry");
    assert!(e.contains("holds an empty entry"), "{e}");
    let p = load(
        "id = \"e\"\nkind = \"env\"\ntitle = \"t\"\n[env]\nappend = { PYTHONPATH = \"/a;/b\" }\nseparator = \";\"\n",
        "e/patch.toml",
    )
    .expect("loads");
    let new = p
        .edit_config(&json!({"config": {"Env": ["PYTHONPATH=/b"]}}))
        .expect("edits")
        .expect("changed");
    // The appended entries end the value in their order, each once.
    assert_eq!(new["config"]["Env"], json!(["PYTHONPATH=/a;/b"]));
}
