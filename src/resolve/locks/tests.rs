use super::*;

fn request(arch: &str, python: &str, installed: &[(&str, &str)]) -> Request {
    Request {
        patch: "req".to_owned(),
        folder: None,
        lines: vec!["tree-top".to_owned()],
        index_args: vec![
            "--index-url".to_owned(),
            "https://ci:t0k@h.example/simple".to_owned(),
        ],
        python: python.to_owned(),
        arch: arch.to_owned(),
        glibc: (2, 36),
        site: "usr/local/lib/python3.11/dist-packages".to_owned(),
        installed: installed
            .iter()
            .map(|(n, v)| {
                (
                    format!("{}-{v}.dist-info", n.replace('-', "_")),
                    format!("Metadata-Version: 2.1\nName: {n}\nVersion: {v}\n\n").into_bytes(),
                )
            })
            .collect(),
    }
}

fn resolution() -> Resolution {
    Resolution {
        lock: "lock-version = \"1.0\"\ncreated-by = \"uv\"\n\n[[packages]]\nname = \"tree-top\"\nversion = \"1.0\"\nwheels = [{ url = \"https://h.example/files/tree_top-1.0-py3-none-any.whl\", hashes = { sha256 = \"00\" } }]\n".to_owned(),
        changes: vec![DistChange {
            name: "tree-top".to_owned(),
            from: None,
            to: Some("1.0".to_owned()),
        }],
        warnings: Vec::new(),
        site: "usr/local/lib/python3.11/dist-packages".to_owned(),
        source: "resolved by uv 0.13.9".to_owned(),
    }
}

#[test]
fn the_environment_names_what_decides_a_resolution() {
    let a = environment(&request(
        "x86_64",
        "3.11.2",
        &[("demo-pkg", "1.0"), ("Base_Lib", "1.0")],
    ));
    assert_eq!(a.installed, ["base-lib==1.0", "demo-pkg==1.0"]);
    assert_eq!(
        (a.glibc.as_str(), a.site.as_str()),
        ("2.36", "/usr/local/lib/python3.11/dist-packages")
    );
    // The index (and its credentials) is not part of it.
    assert!(!format!("{a:?}").contains("t0k"));
    let b = environment(&request(
        "aarch64",
        "3.11.2",
        &[("demo-pkg", "1.0"), ("Base_Lib", "1.0")],
    ));
    assert_eq!(
        difference(&a, &b).unwrap(),
        "architecture x86_64 (the platform's: aarch64)"
    );
    let c = environment(&request(
        "x86_64",
        "3.11.2",
        &[("demo-pkg", "2.0"), ("Base_Lib", "1.0")],
    ));
    assert_eq!(
        difference(&a, &c).unwrap(),
        "another installed set (the platform has demo-pkg==2.0 and lacks demo-pkg==1.0)"
    );
    let d = environment(&request("x86_64", "3.12.1", &[]));
    assert!(difference(&a, &d)
        .unwrap()
        .starts_with("Python 3.11.2 (the platform's: 3.12.1)"));
    assert_eq!(difference(&a, &a.clone()), None);
}

#[test]
fn locks_are_written_read_back_and_replaced() {
    let dir = tempfile::tempdir().expect("tmp");
    let amd = request("x86_64", "3.11.2", &[("demo-pkg", "1.0")]);
    let arm = request("aarch64", "3.11.2", &[("demo-pkg", "1.0")]);
    let entries = vec![
        Entry {
            environment: environment(&amd),
            resolution: resolution(),
            images: vec!["r:t linux/amd64".to_owned()],
        },
        Entry {
            environment: environment(&arm),
            resolution: resolution(),
            images: vec!["r:t linux/arm64/v8".to_owned()],
        },
    ];
    let written = write_folder(dir.path(), &entries).expect("written");
    let names: Vec<&str> = written.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        names,
        ["pylock.x86-64-py311.toml", "pylock.aarch64-py311.toml"]
    );
    let read = read_folder(dir.path()).expect("read");
    assert_eq!(read.len(), 2);
    let amd_lock = read
        .iter()
        .find(|l| l.file == "pylock.x86-64-py311.toml")
        .expect("amd");
    assert_eq!(amd_lock.environment, environment(&amd));
    assert_eq!(amd_lock.images, ["r:t linux/amd64"]);
    let r = amd_lock.resolution("usr/local/lib/python3.11/dist-packages");
    assert_eq!(r.source, "from pylock.x86-64-py311.toml");
    assert_eq!(r.changes, resolution().changes);
    // What uv wrote is kept as written, and the table reads as TOML after it.
    let text = std::fs::read_to_string(dir.path().join("pylock.x86-64-py311.toml")).expect("text");
    assert!(text.starts_with(resolution().lock.trim_end()));
    assert!(text.contains("[tool.runner-patch]"));
    // A second lock with one environment replaces both files with pylock.toml; a lock that is
    // not this tool's stays.
    std::fs::write(
        dir.path().join("pylock.other.toml"),
        "lock-version = \"1.0\"\n",
    )
    .expect("other");
    let one = write_folder(dir.path(), &entries[..1]).expect("one");
    assert_eq!(one[0].0, "pylock.toml");
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    left.sort();
    assert_eq!(left, ["pylock.other.toml", "pylock.toml"]);
}

#[test]
fn names_follow_pep751() {
    for ok in ["pylock.toml", "pylock.x86-64-py311.toml", "pylock.a_b.toml"] {
        assert!(is_lock_name(ok), "{ok}");
    }
    for bad in [
        "pylock.a.b.toml",
        "pylock..toml",
        "lock.toml",
        "pylock.toml.bak",
    ] {
        assert!(!is_lock_name(bad), "{bad}");
    }
}
