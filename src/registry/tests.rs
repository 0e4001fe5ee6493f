use super::*;
use reqwest::StatusCode;

#[test]
fn repo_parsing_follows_docker() {
    let r = Repo::parse("gpustack/runner").expect("parse");
    assert_eq!(
        (r.registry.as_str(), r.repository.as_str()),
        ("docker.io", "gpustack/runner")
    );
    assert_eq!(r.endpoint(), "registry-1.docker.io");
    let r = Repo::parse("docker.io/ubuntu").expect("parse");
    assert_eq!(r.repository, "library/ubuntu");
    let r = Repo::parse("127.0.0.1:5000/gpustack/runner").expect("parse");
    assert_eq!(r.registry, "127.0.0.1:5000");
    assert!(r.is_loopback());
    assert!(Repo::parse("localhost:5000/a")
        .expect("parse")
        .is_loopback());
    assert!(Repo::parse("[::1]:5000/a").expect("parse").is_loopback());
    assert!(!Repo::parse("quay.io/gpustack/runner")
        .expect("parse")
        .is_loopback());
    assert!(Repo::parse("gpustack/runner:tag").is_err());
    assert!(Repo::parse("Bad Name/x").is_err());
    // Hosts no request could reach are refused at parse time.
    for bad in [
        "127.0.0.1:99999/a",
        "127.0.0.1:0/a",
        "[zz]:5000/a",
        "[::1/a",
        &format!("{}.example/a", "x".repeat(64)),
    ] {
        let e = Repo::parse(bad).expect_err(bad);
        assert!(e.contains("registry host"), "{bad}: {e}");
    }
    assert!(Repo::parse("[::1]:5000/a").is_ok() && Repo::parse("[::1]/a").is_ok());
    let (repo, r) = Repo::parse_reference("127.0.0.1:5000/a/b:t1").expect("ref");
    assert_eq!((repo.repository.as_str(), r.tag()), ("a/b", Some("t1")));
    assert!(Repo::parse_reference("127.0.0.1:5000/a/b").is_err());
}

#[test]
fn urls_the_registry_names_are_resolved_and_only_its_origin_is_its_own() {
    let repo = Repo::parse("127.0.0.1:5000/a/b").expect("parse");
    let reg = Http::new(&[&repo]).expect("client");
    assert_eq!(
        reg.absolute(&repo, "/v2/a/b/blobs/uploads/x?s=1"),
        "http://127.0.0.1:5000/v2/a/b/blobs/uploads/x?s=1"
    );
    assert_eq!(
        reg.absolute(&repo, "//other.example:9000/u"),
        "http://other.example:9000/u"
    );
    assert!(reg.is_own(&repo, "http://127.0.0.1:5000/v2/a/b/tags/list?last=x"));
    for foreign in [
        "http://127.0.0.1:5001/v2/",
        "https://127.0.0.1:5000/v2/",
        "http://localhost:5000/v2/",
        "http://127.0.0.1:5000@evil.example/v2/",
        "not a url",
    ] {
        assert!(!reg.is_own(&repo, foreign), "{foreign}");
    }
    let hub = Repo::parse("gpustack/runner").expect("parse");
    assert!(reg.is_own(&hub, "https://registry-1.docker.io:443/v2/x"));
    assert!(!reg.is_own(&hub, "https://docker.io/v2/x"));
}

#[test]
fn deadlines_grow_with_size_at_the_min_rate() {
    let l = transport::Limits {
        base: Duration::from_secs(10),
        min_rate: 1024,
        ..transport::Limits::default()
    };
    assert_eq!(l.deadline(0), Duration::from_secs(10));
    assert_eq!(l.deadline(10 * 1024), Duration::from_secs(20));
}

#[test]
fn backoff_grows_and_is_capped() {
    let r = Retry {
        attempts: 5,
        base: Duration::from_millis(100),
        cap: Duration::from_secs(1),
        budget: Duration::from_secs(10),
    };
    assert!(r.backoff(1) <= Duration::from_millis(300));
    assert!(r.backoff(10) <= Duration::from_millis(1500));
    assert!(retryable(StatusCode::TOO_MANY_REQUESTS) && !retryable(StatusCode::NOT_FOUND));
}
