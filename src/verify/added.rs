//! The layers this tool appended to a patched image: each read as a stream (a layer of wheels
//! may be hundreds of MB), verified, and checked against the patch that wrote it.

use std::io::Read;

use serde_json::Value;
use tokio_util::io::SyncIoBridge;

use crate::digest::HashingReader;
use crate::media::{layer_compression, Compression, Descriptor, Family};
use crate::patch::Patch;
use crate::registry::{Registry, Repo};
use crate::scan;
use crate::verify::subject::Subject;
use crate::verify::types::Error;

/// An added layer read, verified, with its entries.
struct AddedLayer {
    diff_id: String,
    /// Paths of entries that are not whiteouts.
    files: Vec<String>,
}

/// What the appended layers hold together.
#[derive(Debug, Default)]
pub(crate) struct Added {
    /// Each appended layer's diff_id, in order.
    pub ids: Vec<String>,
    /// Every file they write (whiteouts aside).
    pub files: Vec<String>,
}

/// Reads an appended layer as a stream (a layer of wheels may be hundreds of MB): its
/// entries and diff_id; the registry reader checks its digest and size at the end.
async fn read_added(reg: &Registry, repo: &Repo, desc: &Descriptor) -> Result<AddedLayer, Error> {
    let reader = reg.blob_reader(repo, desc).await?;
    let compression = layer_compression(&desc.media_type).unwrap_or(Compression::Gzip);
    let digest = desc.digest.clone();
    tokio::task::spawn_blocking(move || read_tar(SyncIoBridge::new(reader), compression))
        .await
        .map_err(|e| Error::Scan(format!("layer {digest}: {e}")))?
        .map_err(|e| Error::Scan(format!("layer {}: {e}", desc.digest)))
}

/// The entries (whiteouts aside) and diff_id of a layer's compressed bytes, read to the end.
fn read_tar<R: Read>(mut raw: R, compression: Compression) -> std::io::Result<AddedLayer> {
    let mut files = Vec::new();
    let diff_id = {
        let mut tar = HashingReader::new(scan::decompress(&mut raw, compression)?);
        {
            let mut ar = tar::Archive::new(&mut tar);
            for e in ar.entries()? {
                let mut e = e?;
                let path = scan::normalize(&e.path()?.to_string_lossy());
                let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
                if !name.starts_with(".wh.") {
                    files.push(path);
                }
                std::io::copy(&mut e, &mut std::io::sink())?;
            }
        }
        tar.finish()?.0
    };
    // Whatever follows the compressed stream is read too, so the digest is checked.
    std::io::copy(&mut raw, &mut std::io::sink())?;
    Ok(AddedLayer { diff_id, files })
}

/// Problems of one appended layer against the patch that wrote it: entries it does not
/// write, and files it must hold but does not.
fn layer_problems(patch: Option<&Patch>, added: &AddedLayer, problems: &mut Vec<String>) {
    let Some(patch) = patch else { return };
    let stray: Vec<&str> = added
        .files
        .iter()
        .filter(|f| !patch.kind().may_write(f))
        .map(String::as_str)
        .collect();
    if !stray.is_empty() {
        problems.push(format!(
            "the patch layer holds unexpected entries: /{}",
            stray.join(", /")
        ));
    }
    for must in patch.kind().required_in_layer() {
        if !added.files.iter().any(|f| scan::has_suffix(f, &must)) {
            let name = must.rsplit('/').next().unwrap_or(&must);
            problems.push(format!("the last layer holds no {name}"));
        }
    }
}

/// Reads and checks each layer this tool appended: the family's gzip type, only the files its
/// patch writes, and its diff_id in the config.
pub(crate) async fn check(s: &Subject<'_>, problems: &mut Vec<String>) -> Result<Added, Error> {
    let diff_ids = s.config["rootfs"]["diff_ids"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if diff_ids.len() != s.layers.len() {
        problems.push(format!(
            "config lists {} diff_ids for {} layers",
            diff_ids.len(),
            s.layers.len()
        ));
    }
    let mut out = Added::default();
    for (n, desc) in s.layers[s.first_added..].iter().enumerate() {
        let id = &s.layered[n];
        if desc.media_type != s.family.layer_gzip() {
            problems.push(format!(
                "the last layer's media type {:?} is not the {} gzip layer type",
                desc.media_type,
                if s.family == Family::Docker {
                    "Docker"
                } else {
                    "OCI"
                }
            ));
        }
        let added = read_added(s.reg, s.repo, desc).await?;
        layer_problems(s.checks.find(id), &added, problems);
        if diff_ids.get(s.first_added + n).and_then(Value::as_str) != Some(added.diff_id.as_str()) {
            problems.push(format!(
                "the config's last diff_id is not the patch layer's ({})",
                added.diff_id
            ));
        }
        out.files.extend(added.files);
        out.ids.push(added.diff_id);
    }
    Ok(out)
}
