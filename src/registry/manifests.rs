//! Manifests: get (with every check on the answer), head for a digest, put.

use bytes::Bytes;
use oci_spec::distribution::Reference;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::{Method, StatusCode};

use super::transport::{Body, Call};
use super::*;
use crate::digest::sha256;
use crate::media::{Document, MANIFEST_ACCEPT, MANIFEST_MAX_BYTES};

impl Http {
    /// GETs a manifest or index by tag or digest. The answer must be a manifest media type, carry
    /// a `Docker-Content-Digest` that matches its bytes (and the digest asked for), and stay
    /// under the manifest size limit while it streams.
    pub async fn manifest_get(&self, r: &Reference) -> Result<Document, RegistryError> {
        let repo = Self::repo_of(r);
        let what = r.whole();
        let op = "fetching manifest";
        let max = MANIFEST_MAX_BYTES as u64;
        let mut resp = self
            .send(
                Call::pull(op, &what, &repo).moving(max),
                Method::GET,
                &self.manifest_url(r, &repo),
                Self::accept(),
                Body::Empty,
            )
            .await?;
        let status = resp.status();
        if status != StatusCode::OK {
            let msg = if status == StatusCode::NOT_FOUND {
                let m = resp.error_text().await;
                if m.is_empty() {
                    "not found".to_owned()
                } else {
                    format!("not found ({m})")
                }
            } else {
                resp.failure().await
            };
            return Err(RegistryError::new(op, &what, msg, Some(status.as_u16())));
        }
        let headers = resp.headers().clone();
        let ct = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_owned();
        if !MANIFEST_ACCEPT.contains(&ct.as_str()) {
            return Err(RegistryError::new(op, &what, format!("the registry answered Content-Type {ct:?}, not a manifest type; refusing to read it"), None));
        }
        // The deadline scales with the size announced (a trickle of a small manifest ends soon).
        if let Some(n) = resp.resp.content_length() {
            resp.expect(n.min(max));
        }
        let body = resp
            .body(max, "manifests")
            .await
            .map_err(|detail| RegistryError::new(op, &what, detail, None))?;
        let digest = sha256(&body);
        match headers
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
        {
            None => return Err(RegistryError::new(
                op,
                &what,
                "the registry sent no Docker-Content-Digest header; refusing to trust the manifest",
                None,
            )),
            Some(h) if h.trim() != digest => {
                return Err(RegistryError::new(
                    op,
                    &what,
                    format!(
                        "Docker-Content-Digest says {h} but the bytes served have digest {digest}"
                    ),
                    None,
                ))
            }
            Some(_) => {}
        }
        if let Some(d) = r.digest() {
            if d != digest {
                return Err(RegistryError::new(
                    op,
                    &what,
                    format!("served bytes have digest {digest}"),
                    None,
                ));
            }
        }
        let doc = Document::parse(body, "the manifest").map_err(|detail| {
            RegistryError::new("reading manifest", &what, detail.to_string(), None)
        })?;
        if doc.media_type != ct {
            return Err(RegistryError::new(
                op,
                &what,
                format!(
                    "Content-Type {ct} differs from the document's mediaType {}",
                    doc.media_type
                ),
                None,
            ));
        }
        Ok(doc)
    }

    /// The digest a tag (or digest) resolves to now, or `None` when it does not exist. A HEAD,
    /// which Docker Hub does not count against pull limits.
    pub async fn manifest_digest(&self, r: &Reference) -> Result<Option<String>, RegistryError> {
        let repo = Self::repo_of(r);
        let what = r.whole();
        let resp = self
            .send(
                Call::pull("resolving", &what, &repo),
                Method::HEAD,
                &self.manifest_url(r, &repo),
                Self::accept(),
                Body::Empty,
            )
            .await?;
        let status = resp.status();
        let header = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(|d| d.trim().to_owned());
        // Give the slot back before a GET needs one.
        drop(resp);
        match status {
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::OK => match header {
                Some(d) if crate::digest::is_sha256(&d) => Ok(Some(d)),
                _ => Ok(Some(self.manifest_get(r).await?.digest)),
            },
            s => Err(RegistryError::new(
                "resolving",
                &what,
                format!("HTTP {}", s.as_u16()),
                Some(s.as_u16()),
            )),
        }
    }

    /// PUTs a manifest's exact bytes under a tag or digest, with its own media type.
    pub async fn manifest_put(&self, r: &Reference, doc: &Document) -> Result<(), RegistryError> {
        self.manifest_put_answer(r, doc).await.map(|_| ())
    }

    /// [`Http::manifest_put`], returning the `OCI-Subject` header of the answer (a registry
    /// that keeps referrers itself names the subject there).
    pub(crate) async fn manifest_put_answer(
        &self,
        r: &Reference,
        doc: &Document,
    ) -> Result<Option<String>, RegistryError> {
        let repo = Self::repo_of(r);
        let what = r.whole();
        let op = "pushing manifest";
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            doc.media_type.parse().map_err(|_| {
                RegistryError::new(
                    op,
                    &what,
                    format!("media type {:?} is not a valid header", doc.media_type),
                    None,
                )
            })?,
        );
        let mut resp = self
            .send(
                Call::push(op, &what, &repo),
                Method::PUT,
                &self.manifest_url(r, &repo),
                h,
                Body::Bytes(Bytes::from(doc.bytes.clone())),
            )
            .await?;
        let status = resp.status();
        if status != StatusCode::CREATED && status != StatusCode::OK {
            let detail = resp.failure().await;
            return Err(RegistryError::new(op, &what, detail, Some(status.as_u16())));
        }
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_owned())
        };
        if let Some(d) = header("docker-content-digest") {
            if d != doc.digest {
                return Err(RegistryError::new(
                    op,
                    &what,
                    format!("the registry stored digest {d}, not {}", doc.digest),
                    None,
                ));
            }
        }
        Ok(header("oci-subject"))
    }
}
