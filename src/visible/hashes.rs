//! The second read for `PatchKind::hashes`: the layers holding the visible copies of the paths
//! a patch must know the bytes of are read again, each such file hashed as it streams by
//! (`scan::hash_layer`), once per layer and set of paths in a run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio_util::io::SyncIoBridge;

use super::layers::{Error, Layers};
use crate::media::{layer_compression, Descriptor};
use crate::progress;
use crate::registry::{Registry, Repo};
use crate::scan::{self, Descent};

impl Layers {
    /// The sha256 of the visible copy of each of `paths` that is a regular file in the layers
    /// `descent` read (`Descent::node`, `Descent::holder`); paths with none (absent, hidden, a link) are left
    /// out. Each layer holding one is read once more, to its end, its digest checked.
    pub async fn hashes(
        &self,
        reg: &Registry,
        repo: &Repo,
        layers: &[Descriptor],
        descent: &Descent,
        paths: &[String],
        label: &str,
    ) -> Result<BTreeMap<String, String>, Error> {
        let mut by_layer: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        for p in paths {
            if !matches!(descent.node(p), scan::Node::Entry(scan::NodeKind::File)) {
                continue;
            }
            if let Some(i) = descent.holder(p) {
                by_layer.entry(i).or_default().insert(p.clone());
            }
        }
        let mut out = BTreeMap::new();
        for (index, wanted) in by_layer.into_iter().rev() {
            let Some(desc) = layers.get(index) else {
                continue;
            };
            let found = self.hash_one(reg, repo, desc, wanted, label).await?;
            out.extend(found.iter().map(|(p, h)| (p.clone(), h.clone())));
        }
        Ok(out)
    }

    /// One layer's second read, from this run's memory or read now.
    async fn hash_one(
        &self,
        reg: &Registry,
        repo: &Repo,
        desc: &Descriptor,
        paths: BTreeSet<String>,
        label: &str,
    ) -> Result<Arc<BTreeMap<String, String>>, Error> {
        let Some(compression) = layer_compression(&desc.media_type) else {
            return Ok(Arc::default());
        };
        let key = (
            desc.digest.clone(),
            paths.iter().cloned().collect::<Vec<_>>().join("\n"),
        );
        let cell = {
            let mut map = self.hashed.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(key).or_default().clone()
        };
        let found = cell
            .get_or_try_init(|| async {
                let reader = reg.blob_reader(repo, desc).await?;
                let short = desc.digest.get(7..19).unwrap_or(&desc.digest);
                let task = progress::start(format!("{label} {short} (hashes)"), desc.size);
                let counted = progress::Reader::new(SyncIoBridge::new(reader), task);
                let d = desc.clone();
                let found = tokio::task::spawn_blocking(move || {
                    scan::hash_layer(counted, &d, compression, &paths)
                })
                .await
                .map_err(|e| Error::Task(e.to_string()))?
                .map_err(|error| Error::Scan {
                    repo: repo.to_string(),
                    error,
                })?;
                tracing::debug!(
                    "{label}: hashed {} file(s) of layer {}",
                    found.len(),
                    desc.digest
                );
                Ok::<_, Error>(Arc::new(found))
            })
            .await?
            .clone();
        Ok(found)
    }
}

/// Asks each patch which visible files it must know the hash of (`PatchKind::hashes`, on the
/// tree as first read), reads them again and gives the tree their hashes. Nothing is read when
/// no patch asks.
pub async fn give_hashes<'p>(
    layers: &Layers,
    reg: &Registry,
    repo: &Repo,
    descs: &[Descriptor],
    patches: impl IntoIterator<Item = &'p crate::patch::Patch>,
    tree: &mut super::tree::Visible<'_>,
    label: &str,
) -> Result<(), Error> {
    let mut paths: Vec<String> = Vec::new();
    for p in patches {
        for path in p.kind().hashes(tree) {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    if paths.is_empty() {
        return Ok(());
    }
    let found = layers
        .hashes(reg, repo, descs, tree.descent(), &paths, label)
        .await?;
    tree.set_hashes(found);
    Ok(())
}
