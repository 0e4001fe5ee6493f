//! Repositories as users name them: Docker's conventions, hosts checked at parse time, and OCI
//! layout directories (`oci:PATH`) named as skopeo names them.

use std::fmt;

use oci_spec::distribution::Reference;

use super::reference::{transport, valid_tag, NameError, Named};

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
    pub fn parse(input: &str) -> Result<Self, NameError> {
        let name = match transport(input)? {
            Named::Layout(path) => return Repo::layout(input, path),
            Named::Registry(name) => name,
        };
        let invalid = |e: oci_spec::distribution::ParseError| {
            NameError(format!("{name:?} is not a valid repository reference: {e}"))
        };
        let names_tag = || {
            NameError(format!(
                "{name:?} names a tag or digest; give the repository only (tags go in --tag)"
            ))
        };
        // oci-spec's grammar has no IPv6 literals; Docker accepts `[::1]:5000/repo`.
        if let Some((host, path)) = name.strip_prefix('[').and_then(|_| name.split_once('/')) {
            let r: Reference = format!("localhost/{path}").parse().map_err(invalid)?;
            if path.contains(':') || path.contains('@') {
                return Err(names_tag());
            }
            return Repo::on(name, host, r.repository());
        }
        let r: Reference = name.parse().map_err(invalid)?;
        // oci-spec fills in "latest" when no tag was given; refuse an explicit one.
        let last = name.rsplit('/').next().unwrap_or(name);
        if name.contains('@') || last.contains(':') {
            return Err(names_tag());
        }
        Repo::on(name, r.registry(), r.repository())
    }

    /// A repository on `registry`, whose host is checked first (`input` names it in errors).
    fn on(input: &str, registry: &str, repository: &str) -> Result<Self, NameError> {
        check_host(input, registry)?;
        Ok(Repo {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
        })
    }

    /// Splits `REPO:TAG` or `REPO@DIGEST` into the repository and the reference to it
    /// (`oci:PATH:TAG` at the last colon, as skopeo does).
    pub fn parse_reference(input: &str) -> Result<(Self, Reference), NameError> {
        let input = match transport(input)? {
            Named::Layout(_) => return layout_reference(input),
            Named::Registry(name) => name,
        };
        let (repo, rest, is_digest) = if let Some((r, d)) = input.split_once('@') {
            (r, d, true)
        } else {
            let slash = input.rfind('/').unwrap_or(0);
            match input[slash..].rfind(':') {
                Some(i) => (&input[..slash + i], &input[slash + i + 1..], false),
                None => {
                    return Err(NameError(format!(
                        "{input:?} names no tag or digest (REPO:TAG or REPO@DIGEST)"
                    )))
                }
            }
        };
        let repo = Repo::parse(repo)?;
        let r = if is_digest {
            if !crate::digest::is_sha256(rest) {
                return Err(NameError(format!(
                    "{input:?}: {rest:?} is not a sha256 digest"
                )));
            }
            repo.at_digest(rest)
        } else {
            repo.at_tag(checked_tag(input, rest)?)
        };
        Ok((repo, r))
    }

    /// An OCI layout directory named `oci:PATH` (`input`), for `--repository` and
    /// `--target-repository`: the path as given (relative to the working directory), with no
    /// `:` (which would name a tag: tags go in `--tag`).
    fn layout(input: &str, path: &str) -> Result<Repo, NameError> {
        if path.contains(':') {
            return Err(NameError(format!(
                "{input:?} names a tag (after the last ':'); give the layout directory only (tags go in --tag; a directory whose name holds ':' cannot be named here)"
            )));
        }
        Repo::layout_at(input, path, "oci:PATH")
    }

    /// The layout at `path`; `form` is how `input` should have named one.
    fn layout_at(input: &str, path: &str, form: &str) -> Result<Repo, NameError> {
        if path.is_empty() {
            return Err(NameError(format!("{input:?} names no directory ({form})")));
        }
        Ok(Repo {
            registry: String::new(),
            repository: format!("oci:{path}"),
        })
    }

    /// The repository a reference is in.
    pub(crate) fn of(r: &Reference) -> Repo {
        Repo {
            registry: r.registry().to_owned(),
            repository: r.repository().to_owned(),
        }
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

/// `tag`, when it is a valid tag (`input` names it in the error).
fn checked_tag<'a>(input: &str, tag: &'a str) -> Result<&'a str, NameError> {
    if valid_tag(tag) {
        Ok(tag)
    } else {
        Err(NameError(format!("{input:?}: {tag:?} is not a valid tag")))
    }
}

/// `oci:PATH:TAG` split at the last colon, as skopeo does (so PATH may hold colons), or
/// `oci:PATH@sha256:HEX`.
fn layout_reference(input: &str) -> Result<(Repo, Reference), NameError> {
    let rest = input.strip_prefix("oci:").unwrap_or(input);
    if let Some((path, digest)) = rest.rsplit_once('@') {
        if crate::digest::is_sha256(digest) {
            let repo = Repo::layout_at(input, path, "oci:PATH:TAG")?;
            let r = repo.at_digest(digest);
            return Ok((repo, r));
        }
    }
    let Some((path, tag)) = rest.rsplit_once(':') else {
        return Err(NameError(format!(
            "{input:?} names no tag (oci:PATH:TAG; the tag follows the last ':')"
        )));
    };
    let tag = checked_tag(input, tag)?;
    let repo = Repo::layout_at(input, path, "oci:PATH:TAG")?;
    let r = repo.at_tag(tag);
    Ok((repo, r))
}

/// Refuses a registry host no request could reach, before any traffic: a port outside
/// 1-65535, a DNS label over 63 bytes or a name over 253, a bracketed address that is not IPv6.
fn check_host(input: &str, registry: &str) -> Result<(), NameError> {
    let bad = |why: String| {
        Err(NameError(format!(
            "{input:?} names registry host {registry:?}, which {why}"
        )))
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
