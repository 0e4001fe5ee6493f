use super::*;

#[test]
fn the_dry_run_json_gives_installs_upgrades_and_downgrades_by_name() {
    let json = r#"{"schema":{"version":"preview"},"changes":[
        {"name":"fancy-lib","version":"1.1","action":"installed"},
        {"name":"fastext","version":"1.0","action":"uninstalled"},
        {"name":"fastext","version":"1.1","action":"installed"},
        {"name":"nccl","version":"2.28.3","action":"uninstalled"},
        {"name":"nccl","version":"2.27.5","action":"installed"}],"dry_run":true}"#;
    let got: Vec<(String, Option<String>, Option<String>)> = changes(json)
        .unwrap()
        .into_iter()
        .map(|c| (c.name, c.from, c.to))
        .collect();
    let s = |x: &str| Some(x.to_owned());
    assert_eq!(
        got,
        [
            ("fancy-lib".to_owned(), None, s("1.1")),
            ("fastext".to_owned(), s("1.0"), s("1.1")),
            ("nccl".to_owned(), s("2.28.3"), s("2.27.5")),
        ]
    );
    assert!(changes(r#"{"schema":{"version":"2"},"changes":[]}"#)
        .unwrap_err()
        .0
        .contains("schema is \"2\""));
    assert!(changes("Resolved 3 packages").is_err());
    assert!(changes(r#"{"schema":{"version":"preview"},"changes":[{"name":"a","version":"1","action":"built"}]}"#).is_err());
}

#[test]
fn a_url_line_is_its_own_pin() {
    let lines = vec![
        "flash-attn @ https://packages.example.com/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl"
            .to_owned(),
        "ray[client]==2.54.0".to_owned(),
    ];
    assert_eq!(pin("flash_attn", "2.8.3", &lines), lines[0]);
    assert_eq!(pin("ray", "2.54.0", &lines), "ray==2.54.0");
    assert_eq!(pin("aiohttp", "3.9", &lines), "aiohttp==3.9");
}

#[test]
fn warnings_are_uvs_warning_lines_redacted() {
    let stderr = "Resolved 2 packages\nwarning: The package `a` is yanked at https://u:p@h/simple\nwarning: x\n";
    assert_eq!(
        warnings(stderr),
        ["The package `a` is yanked at https://***@h/simple", "x"]
    );
}
