//! The registry client: oci-client behind noun-verb methods that always send the full manifest
//! Accept list, push raw bytes (never re-serialised), and turn every failure into one sentence
//! that names the operation and the object.

use std::fmt;

use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use tokio::io::AsyncRead;
use tokio_util::io::StreamReader;

use crate::digest::sha256;
use crate::media::{Descriptor, Document, MANIFEST_ACCEPT};

/// A repository on a registry, as the user named it (`docker.io/gpustack/runner`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Repo {
    /// Registry host as written after Docker's normalisation (`docker.io`, `127.0.0.1:5000`).
    pub registry: String,
    pub repository: String,
}

impl Repo {
    /// Parses a repository name with Docker's conventions (`gpustack/runner` is on docker.io,
    /// `ubuntu` is `docker.io/library/ubuntu`); a tag or digest is refused.
    pub fn parse(input: &str) -> Result<Self, String> {
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
        Ok(Repo {
            registry: r.registry().to_owned(),
            repository: r.repository().to_owned(),
        })
    }

    /// Splits `REPO:TAG` or `REPO@DIGEST` into the repository and the reference to it.
    pub fn parse_reference(input: &str) -> Result<(Self, Reference), String> {
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

    /// The host that actually serves the registry (`docker.io` is served elsewhere).
    pub fn endpoint(&self) -> String {
        self.at_tag("x").resolve_registry().to_owned()
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

impl fmt::Display for Repo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)
    }
}

/// A registry failure: what was being done, to what, and what the registry said.
#[derive(Debug, thiserror::Error)]
#[error("{op} {what}: {detail}")]
pub struct RegistryError {
    pub op: &'static str,
    pub what: String,
    pub detail: String,
    pub not_found: bool,
}

fn describe(e: &OciDistributionError) -> (String, bool) {
    match e {
        OciDistributionError::RegistryError { envelope, .. } => {
            let nf = envelope.errors.iter().any(|x| {
                matches!(
                    x.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown
                )
            });
            let msg = envelope
                .errors
                .iter()
                .map(|x| format!("{:?}: {}", x.code, x.message))
                .collect::<Vec<_>>()
                .join("; ");
            (format!("registry answered {msg}"), nf)
        }
        OciDistributionError::ServerError { code, message, .. } => {
            let msg: String = message
                .chars()
                .take(120)
                .collect::<String>()
                .replace(['\n', '\r'], " ");
            let msg = if msg.trim().is_empty() {
                String::new()
            } else {
                format!(": {msg}")
            };
            (format!("registry answered HTTP {code}{msg}"), *code == 404)
        }
        OciDistributionError::ImageManifestNotFoundError(m) => (m.clone(), true),
        OciDistributionError::RequestError(r) => {
            let mut s = format!("request failed: {r}");
            let mut src = std::error::Error::source(r);
            while let Some(inner) = src {
                s.push_str(&format!(": {inner}"));
                src = inner.source();
            }
            (s, false)
        }
        other => (other.to_string(), false),
    }
}

fn wrap(
    op: &'static str,
    what: impl Into<String>,
) -> impl FnOnce(OciDistributionError) -> RegistryError {
    let what = what.into();
    move |e| {
        let (detail, not_found) = describe(&e);
        RegistryError {
            op,
            what,
            detail,
            not_found,
        }
    }
}

/// One client for a run; holds the token cache and the auth of each registry.
pub struct Registry {
    client: Client,
    auth: RegistryAuth,
}

impl Registry {
    /// A client for the given repositories: loopback ones over plain HTTP, others over TLS.
    pub fn new(repos: &[&Repo], auth: RegistryAuth) -> Self {
        let plain: Vec<String> = repos
            .iter()
            .filter(|r| r.is_loopback())
            .map(|r| r.endpoint())
            .collect();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(plain),
            // One PUT per blob is the upload every registry supports (chunked uploads have
            // per-registry quirks: GHCR caps chunks, distribution answers 400 for 416).
            use_monolithic_push: true,
            ..Default::default()
        };
        Registry {
            client: Client::new(config),
            auth,
        }
    }

    async fn ready(&self, r: &Reference) {
        self.client
            .store_auth_if_needed(r.resolve_registry(), &self.auth)
            .await;
    }

    /// GETs a manifest or index by tag or digest, verifying a digest reference.
    pub async fn manifest_get(&self, r: &Reference) -> Result<Document, RegistryError> {
        self.ready(r).await;
        let what = r.whole();
        let (bytes, _digest) = self
            .client
            .pull_manifest_raw(r, &self.auth, MANIFEST_ACCEPT)
            .await
            .map_err(wrap("fetching manifest", what.clone()))?;
        let doc =
            Document::parse(bytes.to_vec(), &format!("manifest {what}")).map_err(|detail| {
                RegistryError {
                    op: "reading manifest",
                    what: what.clone(),
                    detail,
                    not_found: false,
                }
            })?;
        if let Some(d) = r.digest() {
            if d != doc.digest {
                return Err(RegistryError {
                    op: "fetching manifest",
                    what,
                    detail: format!("served bytes have digest {}", doc.digest),
                    not_found: false,
                });
            }
        }
        Ok(doc)
    }

    /// The digest a tag points at now, or `None` when the tag does not exist.
    pub async fn manifest_digest(&self, r: &Reference) -> Result<Option<String>, RegistryError> {
        self.ready(r).await;
        match self.client.fetch_manifest_digest(r, &self.auth).await {
            Ok(d) => Ok(Some(d)),
            Err(e) => {
                let err = wrap("resolving", r.whole())(e);
                if err.not_found {
                    Ok(None)
                } else {
                    Err(err)
                }
            }
        }
    }

    /// PUTs a manifest's exact bytes under a tag or digest, with its own media type.
    pub async fn manifest_put(&self, r: &Reference, doc: &Document) -> Result<(), RegistryError> {
        self.ready(r).await;
        let ct = doc.media_type.parse().map_err(|_| RegistryError {
            op: "pushing manifest",
            what: r.whole(),
            detail: format!(
                "media type {:?} is not a valid header value",
                doc.media_type
            ),
            not_found: false,
        })?;
        self.client
            .push_manifest_raw(r, doc.bytes.clone(), ct)
            .await
            .map_err(wrap("pushing manifest", r.whole()))?;
        Ok(())
    }

    pub async fn blob_exists(&self, repo: &Repo, digest: &str) -> Result<bool, RegistryError> {
        let r = repo.at_digest(digest);
        self.ready(&r).await;
        self.client
            .blob_exists(&r, digest)
            .await
            .map_err(wrap("checking blob", format!("{repo}@{digest}")))
    }

    /// Streams a blob; the stream fails at its end if the bytes do not match the digest.
    pub async fn blob_reader(
        &self,
        repo: &Repo,
        desc: &Descriptor,
    ) -> Result<impl AsyncRead + Send + Unpin + 'static, RegistryError> {
        let r = repo.at_digest(&desc.digest);
        self.ready(&r).await;
        let od = OciDescriptor {
            digest: desc.digest.clone(),
            media_type: desc.media_type.clone(),
            size: desc.size as i64,
            ..Default::default()
        };
        let s = self
            .client
            .pull_blob_stream(&r, &od)
            .await
            .map_err(wrap("fetching blob", format!("{repo}@{}", desc.digest)))?;
        Ok(StreamReader::new(s.stream))
    }

    /// Reads a small blob (a config) whole, bounded and verified.
    pub async fn blob_get_small(
        &self,
        repo: &Repo,
        desc: &Descriptor,
        max: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let what = format!("{repo}@{}", desc.digest);
        if desc.size > max {
            return Err(RegistryError {
                op: "fetching blob",
                what,
                detail: format!("{} bytes is over the {max} byte limit", desc.size),
                not_found: false,
            });
        }
        let r = repo.at_digest(&desc.digest);
        self.ready(&r).await;
        let mut out = Vec::with_capacity(desc.size as usize);
        self.client
            .pull_blob(&r, desc.digest.as_str(), &mut out)
            .await
            .map_err(wrap("fetching blob", what.clone()))?;
        if sha256(&out) != desc.digest || out.len() as u64 != desc.size {
            return Err(RegistryError {
                op: "fetching blob",
                what,
                detail: "content does not match its digest or size".into(),
                not_found: false,
            });
        }
        Ok(out)
    }

    /// Uploads a small blob in one request.
    pub async fn blob_put(
        &self,
        repo: &Repo,
        digest: &str,
        bytes: Vec<u8>,
    ) -> Result<(), RegistryError> {
        let r = repo.at_digest(digest);
        self.ready(&r).await;
        self.client
            .push_blob(&r, bytes, digest)
            .await
            .map_err(wrap("uploading blob", format!("{repo}@{digest}")))?;
        Ok(())
    }

    /// Cross-repository mount on one registry; `false` when the registry declined (then upload).
    pub async fn blob_mount(&self, target: &Repo, source: &Repo, digest: &str) -> bool {
        let t = target.at_digest(digest);
        let s = source.at_digest(digest);
        self.ready(&t).await;
        match self.client.mount_blob(&t, &s, digest).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(
                    digest,
                    "mount from {source} into {target} declined: {}",
                    describe(&e).0
                );
                false
            }
        }
    }

    /// Copies a blob between repositories (or registries) as a stream: never whole in memory.
    pub async fn blob_copy(
        &self,
        source: &Repo,
        target: &Repo,
        desc: &Descriptor,
    ) -> Result<(), RegistryError> {
        let what = format!("{source}@{} to {target}", desc.digest);
        let src = source.at_digest(&desc.digest);
        self.ready(&src).await;
        let od = OciDescriptor {
            digest: desc.digest.clone(),
            media_type: desc.media_type.clone(),
            size: desc.size as i64,
            ..Default::default()
        };
        let stream = self
            .client
            .pull_blob_stream(&src, &od)
            .await
            .map_err(wrap("copying blob", what.clone()))?;
        let t = target.at_digest(&desc.digest);
        self.ready(&t).await;
        let body = stream
            .stream
            .map(|r| r.map_err(OciDistributionError::IoError));
        self.client
            .push_blob_stream(&t, body, &desc.digest, Some(desc.size))
            .await
            .map_err(wrap("copying blob", what))?;
        Ok(())
    }

    /// Every tag of a repository, following pagination.
    pub async fn tags_list(&self, repo: &Repo) -> Result<Vec<String>, RegistryError> {
        let r = repo.at_tag("latest");
        self.ready(&r).await;
        let mut tags: Vec<String> = Vec::new();
        let mut last: Option<String> = None;
        loop {
            let page = self
                .client
                .list_tags(&r, &self.auth, Some(1000), last.as_deref())
                .await
                .map_err(wrap("listing tags of", repo.to_string()))?;
            let n = page.tags.len();
            let new_last = page.tags.last().cloned();
            tags.extend(page.tags);
            if n < 1000 || new_last.is_none() || new_last == last {
                break;
            }
            last = new_last;
        }
        Ok(tags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_parsing_follows_docker() {
        let r = Repo::parse("gpustack/runner").expect("parse");
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            ("docker.io", "gpustack/runner")
        );
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
    }
}
