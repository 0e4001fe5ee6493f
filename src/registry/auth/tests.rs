//! Authentication without a registry: challenges, the retry rule for anonymous requests that
//! raced, and credentials read from a Docker config.

use std::time::Duration;

use base64::Engine as _;

use super::challenge::{parse_challenge, Challenge, Scope};
use super::credentials::from_file;
use super::Auth;
use crate::registry::settings::Limits;

const HELPER_LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn concurrent_anonymous_requests_each_retry_after_one_learned_the_challenge() {
    let auth = Auth::new(reqwest::Client::new(), Limits::default());
    let scope = Scope(vec!["repository:a/b:pull".into()]);
    let basic = Some(r#"Basic realm="x""#);
    assert!(auth.rejected("r:1", &scope, basic, false).await);
    assert!(auth.rejected("r:1", &scope, basic, false).await);
}

#[test]
fn challenges_parse() {
    assert_eq!(
        parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#
        ),
        Some(Challenge::Bearer {
            realm: "https://auth.example/token".into(),
            service: Some("registry.example".into())
        })
    );
    assert_eq!(
        parse_challenge(r#"Basic realm="x""#),
        Some(Challenge::Basic)
    );
    assert_eq!(parse_challenge("Negotiate"), None);
}

#[test]
fn credentials_from_docker_config_never_debug_print_the_secret() {
    let dir = std::env::temp_dir().join(format!("rp-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("config.json");
    let auth = base64::engine::general_purpose::STANDARD.encode("bob:s3cret");
    std::fs::write(&path, format!(r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{auth}"}},"127.0.0.1:5000":{{"username":"u","password":"p"}}}}}}"#)).expect("write");
    let hub = from_file(&path, "docker.io", HELPER_LIMIT)
        .expect("read")
        .expect("found");
    assert_eq!(
        (hub.username.as_str(), hub.secret.as_str()),
        ("bob", "s3cret")
    );
    assert!(!format!("{hub:?}").contains("s3cret"));
    let local = from_file(&path, "127.0.0.1:5000", HELPER_LIMIT)
        .expect("read")
        .expect("found");
    assert_eq!(local.username, "u");
    assert!(from_file(&path, "quay.io", HELPER_LIMIT)
        .expect("read")
        .is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
