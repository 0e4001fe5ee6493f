//! Unit tests of the registry client's parts that need no registry: names, URLs, bounds,
//! retries, error kinds.

use std::time::Duration;

use reqwest::StatusCode;

use crate::media::Descriptor;

use super::body::Envelope;
use super::error::ErrorKind;
use super::repo::Repo;
use super::router::Registry;
use super::settings::{Limits, Retry, Settings};
use super::transport::{retryable, Transport};

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
        let e = Repo::parse(bad).expect_err(bad).to_string();
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
    let reg = Transport::new(&[&repo], Settings::default()).expect("client");
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
    let l = Limits {
        base: Duration::from_secs(10),
        min_rate: 1024,
        ..Limits::default()
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

#[test]
fn transports_are_split_as_skopeo_names_them() {
    let r = Repo::parse("oci:some/dir").expect("layout");
    assert_eq!(r.layout_path(), Some("some/dir"));
    assert_eq!(r.to_string(), "oci:some/dir");
    assert_eq!(r.at_tag("t1").whole(), "oci:some/dir:t1");
    assert!(Repo::parse("oci:dir:tag").is_err() && Repo::parse("oci:").is_err());
    let (repo, r) = Repo::parse_reference("oci:/tmp/a:b/dir:t1").expect("ref");
    assert_eq!(
        (repo.layout_path(), r.tag()),
        (Some("/tmp/a:b/dir"), Some("t1"))
    );
    let d = format!("sha256:{}", "a".repeat(64));
    let (repo, r) = Repo::parse_reference(&format!("oci:x@{d}")).expect("digest");
    assert_eq!(
        (repo.layout_path(), r.digest()),
        (Some("x"), Some(d.as_str()))
    );
    assert!(Repo::parse_reference("oci:dir").is_err());
    // A map names a layout as oci:PATH:TAG; it reads back to the same repository.
    let back = Repo::parse_reference(&repo.at_tag("t").whole()).expect("back");
    assert_eq!(back.0, repo);
    // docker:// is the registry transport; host:port still names a registry.
    let r = Repo::parse("docker://127.0.0.1:5000/a/b").expect("docker://");
    assert_eq!(
        (r.registry.as_str(), r.layout_path()),
        ("127.0.0.1:5000", None)
    );
    assert!(Repo::parse("localhost:5000/a").is_ok());
    for other in [
        "oci-archive:x.tar",
        "dir:/tmp/x",
        "docker-archive:x.tar",
        "containers-storage:x",
        "ocidir://x",
        "oci-layout://x",
    ] {
        let e = Repo::parse(other).expect_err(other).to_string();
        assert!(e.contains("transport") && e.contains("oci:PATH"), "{e}");
        assert!(Repo::parse_reference(&format!("{other}:t")).is_err());
    }
}

#[test]
fn retries_are_set_by_the_caller_not_the_environment() {
    // The binary reads RUNNER_PATCH_RETRIES; the library's default is 5 retries whatever the
    // environment says.
    assert_eq!(Retry::default().attempts, 6);
    assert_eq!(Retry::with_retries(0).attempts, 1);
    assert_eq!(Retry::with_retries(2).attempts, 3);
    assert_eq!(Retry::with_retries(u32::MAX).attempts, u32::MAX);
    assert_eq!(Settings::default().with_max_requests(3).max_requests, 3);
}

#[test]
fn error_kinds_come_from_the_registry_s_codes_then_its_status() {
    let env = Envelope::parse(
        br#"{"errors":[{"code":"MANIFEST_BLOB_UNKNOWN","message":"blob unknown to registry","detail":"sha256:x"}]}"#,
    );
    assert_eq!(
        env.message,
        "MANIFEST_BLOB_UNKNOWN blob unknown to registry"
    );
    assert_eq!(
        ErrorKind::of_answer(400, &env.codes),
        ErrorKind::BlobUnknown
    );
    assert_eq!(ErrorKind::of_answer(400, &[]), ErrorKind::Status);
    assert_eq!(ErrorKind::of_answer(401, &[]), ErrorKind::Unauthorized);
    assert_eq!(ErrorKind::of_answer(403, &[]), ErrorKind::Denied);
    assert_eq!(ErrorKind::of_answer(404, &[]), ErrorKind::NotFound);
    let text = Envelope::parse(b"<html>\nbad gateway\n</html>");
    assert_eq!(text.message, "<html> bad gateway </html>");
    assert!(text.codes.is_empty());
}

#[tokio::test]
async fn a_layout_only_run_serves_layouts_through_the_router_and_refuses_registries() {
    let tmp = tempfile::tempdir().expect("tmp");
    let layout = Repo::parse(&format!("oci:{}", tmp.path().join("l").display())).expect("repo");
    let reg = Registry::new(&[&layout], Settings::default()).expect("client");
    let blob = b"a blob".to_vec();
    let digest = crate::digest::sha256(&blob);
    assert!(!reg.blob_exists(&layout, &digest).await.expect("exists"));
    reg.blob_put(&layout, &digest, blob.clone())
        .await
        .expect("put");
    assert!(reg.blob_exists(&layout, &digest).await.expect("exists"));
    let desc = Descriptor {
        media_type: crate::media::OCI_CONFIG.to_owned(),
        digest: digest.clone(),
        size: blob.len() as u64,
        urls: Vec::new(),
    };
    assert_eq!(
        reg.blob_get_small(&layout, &desc, 1024).await.expect("get"),
        blob
    );
    let missing = reg
        .manifest_get(&layout.at_tag("none"))
        .await
        .expect_err("no such tag");
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");
    let remote = Repo::parse("127.0.0.1:5000/a/b").expect("repo");
    let e = reg
        .tags_list(&remote)
        .await
        .expect_err("no registry client");
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert_eq!(
        e.to_string(),
        "reaching 127.0.0.1:5000/a/b: this run was set up for OCI layouts only"
    );
}

/// A reader that gives `good` bytes, then fails.
struct Failing(std::io::Cursor<Vec<u8>>);

impl std::io::Read for Failing {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf)? {
            0 => Err(std::io::Error::other("the disk went away")),
            n => Ok(n),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_put_from_a_reader_is_streamed_in_chunks_and_checked() {
    let tmp = tempfile::tempdir().expect("tmp");
    let layout = Repo::parse(&format!("oci:{}", tmp.path().join("l").display())).expect("repo");
    let reg = Registry::new(&[&layout], Settings::default()).expect("client");
    // Three and a half chunks of the reader's 1 MiB.
    let blob: Vec<u8> = (0..(7u32 << 19)).map(|i| (i % 251) as u8).collect();
    let desc = Descriptor {
        media_type: crate::media::OCI_LAYER_GZIP.to_owned(),
        digest: crate::digest::sha256(&blob),
        size: blob.len() as u64,
        urls: Vec::new(),
    };
    // Other bytes of the same size are refused, and nothing is stored.
    let mut other = blob.clone();
    other[3 << 20] ^= 1;
    let wrong =
        move || Box::new(std::io::Cursor::new(other.clone())) as Box<dyn std::io::Read + Send>;
    let e = reg
        .blob_put_reader(&layout, &desc, &wrong)
        .await
        .expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::Integrity, "{e}");
    assert!(!reg
        .blob_exists(&layout, &desc.digest)
        .await
        .expect("exists"));
    // A reader that fails is named with the blob.
    let part = blob[..1 << 20].to_vec();
    let failing = move || {
        Box::new(Failing(std::io::Cursor::new(part.clone()))) as Box<dyn std::io::Read + Send>
    };
    let e = reg
        .blob_put_reader(&layout, &desc, &failing)
        .await
        .expect_err("refused");
    assert!(
        e.to_string().contains(&desc.digest) && e.to_string().contains("the disk went away"),
        "{e}"
    );
    assert!(!reg
        .blob_exists(&layout, &desc.digest)
        .await
        .expect("exists"));
    // The right bytes are stored whole.
    let right = {
        let blob = blob.clone();
        move || Box::new(std::io::Cursor::new(blob.clone())) as Box<dyn std::io::Read + Send>
    };
    reg.blob_put_reader(&layout, &desc, &right)
        .await
        .expect("stored");
    let got = reg
        .blob_get_small(&layout, &desc, 8 << 20)
        .await
        .expect("read back");
    assert_eq!(got, blob);
}
