//! What a registry asks for (`WWW-Authenticate` challenges) and what a token is asked for
//! (scopes).

use std::collections::HashMap;

/// How a registry asked to be authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

/// Parses `WWW-Authenticate: Bearer realm="...",service="...",scope="..."` or `Basic realm=...`.
pub(crate) fn parse_challenge(h: &str) -> Option<Challenge> {
    let h = h.trim();
    let (scheme, rest) = h.split_once(' ').unwrap_or((h, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut params = params(rest);
    Some(Challenge::Bearer {
        realm: params.remove("realm")?,
        service: params.remove("service"),
    })
}

/// `key="value", key=value` pairs, keys lowercased.
fn params(mut s: &str) -> HashMap<String, String> {
    let mut params = HashMap::new();
    while !s.is_empty() {
        let Some((k, after)) = s.split_once('=') else {
            break;
        };
        let k = k.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let (v, tail) = match after.strip_prefix('"') {
            Some(q) => match q.find('"') {
                Some(end) => (&q[..end], &q[end + 1..]),
                None => (q, ""),
            },
            None => match after.find(',') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            },
        };
        params.insert(k, v.to_owned());
        s = tail.trim_start_matches(',').trim_start();
    }
    params
}

/// What a token request asks for: `repository:<name>:<actions>` entries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Scope(pub Vec<String>);

impl Scope {
    pub fn pull(repo: &str) -> Self {
        Scope(vec![format!("repository:{repo}:pull")])
    }
    pub fn push(repo: &str) -> Self {
        Scope(vec![format!("repository:{repo}:pull,push")])
    }
    /// One token for a cross-repository mount: push on the target and pull on the source
    /// (oci-client asks for the target only, and Docker Hub then refuses the mount).
    pub fn mount(target: &str, source: &str) -> Self {
        Scope(vec![
            format!("repository:{target}:pull,push"),
            format!("repository:{source}:pull"),
        ])
    }
}
