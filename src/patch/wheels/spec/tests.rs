use std::path::Path;

use super::*;

const HEAD: &str = "id = \"w\"\nkind = \"wheels\"\ntitle = \"t\"\n";

fn load(dir: &Path, toml: &str) -> Result<Spec, String> {
    let text = format!("{HEAD}{toml}");
    let origin = dir.join("patch.toml").display().to_string();
    let src = Source {
        text: &text,
        origin: &origin,
        folder: Some(dir),
    };
    read(&src).map_err(|e| e.to_string())
}

#[test]
fn requirements_as_a_list_or_a_file_with_index_options() {
    let dir = tempfile::tempdir().expect("tmp");
    let spec = load(
        dir.path(),
        "requirements = [\"librosa\", \"nvidia-nccl-cu${CUDA_VERSION%%.*}==2.27.5\"]\nindex-url = \"https://ci:t0ken@packages.example.com/simple\"\nextra-index-url = [\"https://mirror.example.com/simple\"]\nfind-links = [\"https://packages.example.com/wheels/\"]\n",
    )
    .expect("loads");
    let r = spec.requirements.expect("requirements");
    assert_eq!(r.file, None);
    assert_eq!(r.lines[1].text, "nvidia-nccl-cu${CUDA_VERSION%%.*}==2.27.5");
    assert!(
        r.lines[1].origin.ends_with("patch.toml:4: requirements[1]"),
        "{}",
        r.lines[1].origin
    );
    assert_eq!(
        spec.index.uv_args(),
        [
            "--index-url",
            "https://ci:t0ken@packages.example.com/simple",
            "--extra-index-url",
            "https://mirror.example.com/simple",
            "--find-links",
            "https://packages.example.com/wheels/",
        ]
    );
    assert_eq!(
        spec.index.shown(),
        [
            "https://***@packages.example.com/simple",
            "https://mirror.example.com/simple",
            "https://packages.example.com/wheels/",
        ]
    );

    std::fs::write(
        dir.path().join("requirements.txt"),
        "# audio\nlibrosa\nsoundfile\nmistral_common[audio]\n",
    )
    .expect("write");
    let spec = load(dir.path(), "requirements = \"requirements.txt\"\nno-index = true\nfind-links = [\"http://127.0.0.1:9/w/\"]\n").expect("loads");
    let r = spec.requirements.expect("requirements");
    assert_eq!(r.file.as_deref(), Some("requirements.txt"));
    assert_eq!(r.lines.len(), 3);
    assert_eq!(
        spec.lock_bytes,
        std::fs::read(dir.path().join("requirements.txt")).expect("read")
    );
    assert_eq!(
        spec.index.uv_args(),
        ["--find-links", "http://127.0.0.1:9/w/", "--no-index"]
    );
}

#[test]
fn the_route_and_its_options_are_refused_naming_file_and_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::write(
        d.join("pylock.toml"),
        "lock-version = \"1.0\"\ncreated-by = \"t\"\n",
    )
    .expect("lock");
    std::fs::write(d.join("requirements.txt"), "librosa\n-r more.txt\n").expect("reqs");
    for (toml, says) in [
        (
            "lock = \"pylock.toml\"\nrequirements = [\"a\"]\n",
            "patch.toml:5: lock and requirements are two routes",
        ),
        (
            "requirements = []\n",
            "patch.toml:4: requirements: the list is empty",
        ),
        ("requirements = 3\n", "patch.toml:4: requirements is a list"),
        (
            "requirements = [\"a\", 1]\n",
            "patch.toml:4: requirements[1]: is not a string",
        ),
        (
            "requirements = [\"-e .\"]\n",
            "patch.toml:4: requirements[0]: -e is an option line",
        ),
        (
            "requirements = \"../requirements.txt\"\n",
            "patch.toml:4: requirements \"../requirements.txt\" must name a file",
        ),
        ("requirements = \"absent.txt\"\n", "absent.txt"),
        (
            "requirements = \"requirements.txt\"\n",
            "requirements.txt:2: -r is an option line",
        ),
        (
            "requirements = [\"a\"]\nindex-url = \"ftp://x/simple\"\n",
            "patch.toml:5: index-url: ftp://x/simple is not an http(s) URL",
        ),
        (
            "requirements = [\"a\"]\nindex-url = \"nonsense\"\n",
            "patch.toml:5: index-url: nonsense is not",
        ),
        (
            "requirements = [\"a\"]\nindex-url = \"https://x/simple\"\nno-index = true\n",
            "patch.toml:6: no-index = true leaves",
        ),
        (
            "remove = [\"a\"]\nindex-url = \"https://x/simple\"\n",
            "patch.toml:5: index options apply to requirements only",
        ),
        (
            "requirements = [\"a\"]\nindex = \"https://x/simple\"\n",
            "unknown field `index`",
        ),
    ] {
        let e = load(d, toml).expect_err(toml);
        assert!(e.contains(says), "{toml}: {e}");
    }
    let e = load(d, "requirements = [\"a\"]\nindex-url = \"https://u:s3cret@x.example/simple\nno-index = true\n");
    assert!(e.is_err());
    let e = load(
        d,
        "requirements = [\"a\"]\nextra-index-url = [\"htp://u:s3cret@x.example/simple\"]\n",
    )
    .expect_err("bad");
    assert!(!e.contains("s3cret") && e.contains("***@"), "{e}");
}

#[test]
fn redact_hides_only_the_credentials() {
    for (url, shown) in [
        (
            "https://user:token@host.example/simple",
            "https://***@host.example/simple",
        ),
        (
            "http://token@host.example:8080/simple/",
            "http://***@host.example:8080/simple/",
        ),
        (
            "https://host.example/simple?u=a@b",
            "https://host.example/simple?u=a@b",
        ),
        ("https://host.example/simple", "https://host.example/simple"),
        ("not a url", "not a url"),
    ] {
        assert_eq!(redact(url), shown);
    }
}

#[test]
fn credentials_go_back_on_their_own_host_only() {
    let o = IndexOptions {
        index_url: Some("http://ci:t0k@127.0.0.1:81/simple".to_owned()),
        extra_index_urls: vec!["https://other.example:8443/simple".to_owned()],
        ..IndexOptions::default()
    };
    assert_eq!(
        o.with_credentials("http://127.0.0.1:81/files/a.whl"),
        "http://ci:t0k@127.0.0.1:81/files/a.whl"
    );
    for untouched in [
        "http://127.0.0.1:82/files/a.whl",
        "https://127.0.0.1:81/files/a.whl",
        "https://other.example/b.whl",
        "http://u:v@127.0.0.1:81/files/a.whl",
    ] {
        assert_eq!(o.with_credentials(untouched), untouched);
    }
}
