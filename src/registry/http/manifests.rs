//! Manifests: get (with every check on the answer), head for a digest, put (with the wait
//! distribution needs while another client commits the same blobs).

use std::time::Duration;

use bytes::Bytes;
use oci_spec::distribution::Reference;
use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};

use crate::digest::sha256;
use crate::media::{Document, MANIFEST_ACCEPT, MANIFEST_MAX_BYTES};
use crate::registry::body::Answer;
use crate::registry::error::{Error, ErrorKind};
use crate::registry::repo::Repo;
use crate::registry::transport::{Body, Call, Transport};

const GET: &str = "fetching manifest";
const PUT: &str = "pushing manifest";

fn url(t: &Transport, r: &Reference, repo: &Repo) -> String {
    let reference = r.digest().or(r.tag()).unwrap_or("latest");
    format!("{}/manifests/{reference}", t.base(repo))
}

/// Every manifest media type: distribution answers 404 for an OCI index not in the list.
fn accept() -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = MANIFEST_ACCEPT.join(", ").parse() {
        h.insert(ACCEPT, v);
    }
    h
}

/// A manifest's body, bounded by the manifest size limit and by a deadline that scales with
/// the size announced (a trickle of a small manifest ends soon).
pub(super) async fn read_body(
    mut answer: Answer,
    op: &'static str,
    what: &str,
) -> Result<Vec<u8>, Error> {
    let max = MANIFEST_MAX_BYTES as u64;
    answer.expect_announced(max);
    answer
        .body(max, "manifests")
        .await
        .map_err(|c| c.during(op, what))
}

/// GETs a manifest or index by tag or digest. The answer must be a manifest media type, carry
/// a `Docker-Content-Digest` that matches its bytes (and the digest asked for), and stay
/// under the manifest size limit while it streams.
pub(super) async fn get(t: &Transport, r: &Reference) -> Result<Document, Error> {
    let repo = Repo::of(r);
    let what = r.whole();
    let mut resp = t
        .send(
            Call::pull(GET, &what, &repo).moving(MANIFEST_MAX_BYTES as u64),
            Method::GET,
            &url(t, r, &repo),
            accept(),
            Body::Empty,
        )
        .await?;
    let status = resp.status();
    if status == StatusCode::NOT_FOUND {
        let m = resp.envelope().await.message;
        let msg = if m.is_empty() {
            "not found".to_owned()
        } else {
            format!("not found ({m})")
        };
        return Err(Error::new(ErrorKind::NotFound, GET, &what, msg).with_status(404));
    }
    if status != StatusCode::OK {
        return Err(resp.fail(GET, &what).await);
    }
    let ct = resp
        .header(CONTENT_TYPE.as_str())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_owned();
    if !MANIFEST_ACCEPT.contains(&ct.as_str()) {
        return Err(Error::new(ErrorKind::Protocol, GET, &what, format!("the registry answered Content-Type {ct:?}, not a manifest type; refusing to read it")));
    }
    let header = resp.header("docker-content-digest");
    let body = read_body(resp, GET, &what).await?;
    check_digest(r, &what, &body, header.as_deref())?;
    let doc = Document::parse(body, "the manifest")
        .map_err(|e| Error::document("reading manifest", &what, e))?;
    if doc.media_type != ct {
        return Err(Error::new(
            ErrorKind::Protocol,
            GET,
            &what,
            format!(
                "Content-Type {ct} differs from the document's mediaType {}",
                doc.media_type
            ),
        ));
    }
    Ok(doc)
}

/// Refuses a manifest's bytes unless the registry's `Docker-Content-Digest` (`header`) and the
/// digest asked for (if any) both name them.
fn check_digest(r: &Reference, what: &str, body: &[u8], header: Option<&str>) -> Result<(), Error> {
    let digest = sha256(body);
    let integrity = |detail: String| Error::new(ErrorKind::Integrity, GET, what, detail);
    match header {
        None => {
            return Err(Error::new(
                ErrorKind::Protocol,
                GET,
                what,
                "the registry sent no Docker-Content-Digest header; refusing to trust the manifest",
            ))
        }
        Some(h) if h != digest => {
            return Err(integrity(format!(
                "Docker-Content-Digest says {h} but the bytes served have digest {digest}"
            )))
        }
        Some(_) => {}
    }
    if r.digest().is_some_and(|d| d != digest) {
        return Err(integrity(format!("served bytes have digest {digest}")));
    }
    Ok(())
}

/// The digest a tag (or digest) resolves to now, or `None` when it does not exist. A HEAD,
/// which Docker Hub does not count against pull limits.
pub(super) async fn digest(t: &Transport, r: &Reference) -> Result<Option<String>, Error> {
    let repo = Repo::of(r);
    let what = r.whole();
    let resp = t
        .send(
            Call::pull("resolving", &what, &repo),
            Method::HEAD,
            &url(t, r, &repo),
            accept(),
            Body::Empty,
        )
        .await?;
    let status = resp.status();
    let header = resp.header("docker-content-digest");
    // Give the slot back before a GET needs one.
    drop(resp);
    match status {
        StatusCode::NOT_FOUND => Ok(None),
        StatusCode::OK => match header {
            Some(d) if crate::digest::is_sha256(&d) => Ok(Some(d)),
            _ => Ok(Some(get(t, r).await?.digest)),
        },
        s => Err(Error::unexpected("resolving", &what, s.as_u16())),
    }
}

/// PUTs a manifest's exact bytes under a tag or digest, with its own media type; returns the
/// `OCI-Subject` header of the answer (a registry that keeps referrers itself names the
/// subject there).
///
/// Distribution answers MANIFEST_BLOB_UNKNOWN for a moment while another client commits the
/// same blob (two runs patching one tag at once); every blob was confirmed before this PUT, so
/// the answer is retried a few times before it is believed.
pub(super) async fn put(
    t: &Transport,
    r: &Reference,
    doc: &Document,
) -> Result<Option<String>, Error> {
    let mut pause = Duration::from_millis(200);
    let mut attempt = 1;
    loop {
        match put_once(t, r, doc).await {
            Err(e)
                if attempt < 4 && e.kind() == ErrorKind::BlobUnknown && e.status() == Some(400) =>
            {
                tracing::debug!("{e}; retrying in {pause:?}");
                tokio::time::sleep(pause).await;
                pause *= 2;
                attempt += 1;
            }
            other => return other,
        }
    }
}

async fn put_once(t: &Transport, r: &Reference, doc: &Document) -> Result<Option<String>, Error> {
    let repo = Repo::of(r);
    let what = r.whole();
    let mut h = HeaderMap::new();
    h.insert(
        CONTENT_TYPE,
        doc.media_type.parse().map_err(|_| {
            Error::new(
                ErrorKind::Invalid,
                PUT,
                &what,
                format!("media type {:?} is not a valid header", doc.media_type),
            )
        })?,
    );
    let mut resp = t
        .send(
            Call::push(PUT, &what, &repo),
            Method::PUT,
            &url(t, r, &repo),
            h,
            Body::Bytes(Bytes::from(doc.bytes.clone())),
        )
        .await?;
    let status = resp.status();
    if status != StatusCode::CREATED && status != StatusCode::OK {
        return Err(resp.fail(PUT, &what).await);
    }
    if let Some(d) = resp.header("docker-content-digest") {
        if d != doc.digest {
            return Err(Error::new(
                ErrorKind::Integrity,
                PUT,
                &what,
                format!("the registry stored digest {d}, not {}", doc.digest),
            ));
        }
    }
    Ok(resp.header("oci-subject"))
}
