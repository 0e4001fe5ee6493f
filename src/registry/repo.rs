//! Repositories as users name them: Docker's conventions, hosts checked at parse time.

use std::fmt;

use oci_spec::distribution::Reference;

use super::reference;

/// A repository on a registry, as the user named it (`docker.io/gpustack/runner`), or an OCI
/// layout directory (`oci:PATH`: `registry` empty, `repository` `oci:PATH`, so that references
/// to it print as skopeo writes them, `oci:PATH:TAG`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Repo {
    /// Registry host as written after Docker's normalisation (`docker.io`, `127.0.0.1:5000`);
    /// empty for a layout.
    pub registry: String,
    pub repository: String,
}

impl Repo {
    /// Parses a repository name with Docker's conventions (`gpustack/runner` is on docker.io,
    /// `ubuntu` is `docker.io/library/ubuntu`; `docker://` may lead), or `oci:PATH`; a tag or
    /// digest is refused, and so is any other transport.
    pub fn parse(input: &str) -> Result<Self, String> {
        let input = match super::reference::transport(input)? {
            reference::Named::Layout(path) => return Repo::layout(input, path),
            reference::Named::Registry(name) => name,
        };
        // oci-spec's grammar has no IPv6 literals; Docker accepts `[::1]:5000/repo`.
        if let Some((host, path)) = input.strip_prefix('[').and_then(|_| input.split_once('/')) {
            let r: Reference = format!("localhost/{path}")
                .parse()
                .map_err(|e| format!("{input:?} is not a valid repository reference: {e}"))?;
            if path.contains(':') || path.contains('@') {
                return Err(format!(
                    "{input:?} names a tag or digest; give the repository only (tags go in --tag)"
                ));
            }
            check_host(input, host)?;
            return Ok(Repo {
                registry: host.to_owned(),
                repository: r.repository().to_owned(),
            });
        }
        let r: Reference = input
            .parse()
            .map_err(|e| format!("{input:?} is not a valid repository reference: {e}"))?;
        // oci-spec fills in "latest" when no tag was given; refuse an explicit one.
        let last = input.rsplit('/').next().unwrap_or(input);
        if input.contains('@') || last.contains(':') {
            return Err(format!(
                "{input:?} names a tag or digest; give the repository only (tags go in --tag)"
            ));
        }
        check_host(input, r.registry())?;
        Ok(Repo {
            registry: r.registry().to_owned(),
            repository: r.repository().to_owned(),
        })
    }

    /// Splits `REPO:TAG` or `REPO@DIGEST` into the repository and the reference to it
    /// (`oci:PATH:TAG` at the last colon, as skopeo does).
    pub fn parse_reference(input: &str) -> Result<(Self, Reference), String> {
        let input = match super::reference::transport(input)? {
            reference::Named::Layout(_) => return reference::layout_reference(input),
            reference::Named::Registry(name) => name,
        };
        let (repo, rest, is_digest) = if let Some((r, d)) = input.split_once('@') {
            (r, d, true)
        } else {
            let slash = input.rfind('/').unwrap_or(0);
            match input[slash..].rfind(':') {
                Some(i) => (&input[..slash + i], &input[slash + i + 1..], false),
                None => {
                    return Err(format!(
                        "{input:?} names no tag or digest (REPO:TAG or REPO@DIGEST)"
                    ))
                }
            }
        };
        let repo = Repo::parse(repo)?;
        let r = if is_digest {
            if !crate::digest::is_sha256(rest) {
                return Err(format!("{input:?}: {rest:?} is not a sha256 digest"));
            }
            repo.at_digest(rest)
        } else {
            if rest.is_empty()
                || rest.len() > 128
                || !rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                return Err(format!("{input:?}: {rest:?} is not a valid tag"));
            }
            repo.at_tag(rest)
        };
        Ok((repo, r))
    }

    /// The OCI layout directory this repository is, if it is one.
    pub fn layout_path(&self) -> Option<&str> {
        if self.registry.is_empty() {
            self.repository.strip_prefix("oci:")
        } else {
            None
        }
    }

    pub fn at_tag(&self, tag: &str) -> Reference {
        Reference::with_tag(
            self.registry.clone(),
            self.repository.clone(),
            tag.to_owned(),
        )
    }

    pub fn at_digest(&self, digest: &str) -> Reference {
        Reference::with_digest(
            self.registry.clone(),
            self.repository.clone(),
            digest.to_owned(),
        )
    }

    /// The host that serves the registry's API: Docker Hub's `docker.io` is served by
    /// `registry-1.docker.io`.
    pub fn endpoint(&self) -> String {
        match self.registry.as_str() {
            "docker.io" | "index.docker.io" => "registry-1.docker.io".to_owned(),
            r => r.to_owned(),
        }
    }

    /// Loopback registries are spoken to over plain HTTP, as Docker does; all others over TLS.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or(rest).to_owned(),
            None => self
                .registry
                .split(':')
                .next()
                .unwrap_or(&self.registry)
                .to_owned(),
        };
        host == "localhost"
            || host == "::1"
            || host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

/// Refuses a registry host no request could reach, before any traffic: a port outside
/// 1-65535, a DNS label over 63 bytes or a name over 253, a bracketed address that is not IPv6.
fn check_host(input: &str, registry: &str) -> Result<(), String> {
    let bad = |why: String| {
        Err(format!(
            "{input:?} names registry host {registry:?}, which {why}"
        ))
    };
    let (host, port) = match registry.strip_prefix('[') {
        Some(rest) => {
            let Some((addr, after)) = rest.split_once(']') else {
                return bad("has no closing ']'".into());
            };
            if addr.parse::<std::net::Ipv6Addr>().is_err() {
                return bad(format!(
                    "puts {addr:?} in brackets, which is not an IPv6 address"
                ));
            }
            match after {
                "" => (addr, None),
                p => match p.strip_prefix(':') {
                    Some(p) => (addr, Some(p)),
                    None => return bad("has text after the IPv6 address".into()),
                },
            }
        }
        None => match registry.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (registry, None),
        },
    };
    if let Some(p) = port {
        if !p.parse::<u16>().is_ok_and(|n| n > 0) {
            return bad(format!("has port {p:?}, not a number from 1 to 65535"));
        }
    }
    if !registry.starts_with('[') {
        if host.len() > 253 {
            return bad("is longer than 253 characters".into());
        }
        if let Some(l) = host.split('.').find(|l| l.is_empty() || l.len() > 63) {
            return bad(format!(
                "has a label of {} characters (1 to 63 allowed)",
                l.len()
            ));
        }
    }
    if reqwest::Url::parse(&format!("https://{registry}/")).is_err() {
        return bad("is not a valid host".into());
    }
    Ok(())
}

impl fmt::Display for Repo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.registry.is_empty() {
            return write!(f, "{}", self.repository);
        }
        write!(f, "{}/{}", self.registry, self.repository)
    }
}
