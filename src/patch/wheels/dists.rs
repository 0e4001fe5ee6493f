//! The installed distributions an image shows, as the `wheels` kind reads them: each
//! `.dist-info` with its parsed `METADATA`, the site dir holding it, the paths its `RECORD`
//! lists (relative to `/`), and whether the files it hashes are still those bytes.

use super::install::join;
use super::record;
use super::requires::{self, Metadata};
use crate::patch::dist::Dist;
use crate::patch::tree::Tree;

/// An installed dist with its parsed `METADATA`.
pub struct Present {
    pub dist: Dist,
    pub meta: Metadata,
}

/// The installed dists a tree shows whose `METADATA` reads (others cannot be matched).
pub fn installed(tree: &dyn Tree) -> Vec<Present> {
    tree.dists()
        .into_iter()
        .filter_map(|dist| {
            let meta = requires::parse_metadata(dist.files.get("METADATA")?).ok()?;
            Some(Present { dist, meta })
        })
        .collect()
}

/// The directory holding a dist's `.dist-info` (its site dir).
pub fn site_of(dist: &Dist) -> &str {
    dist.dir.rsplit_once('/').map_or("", |(d, _)| d)
}

/// `path` with `.` and `..` parts folded; `None` when it climbs above `/`.
fn fold(path: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            p => out.push(p),
        }
    }
    Some(out.join("/"))
}

/// A `RECORD` row's path relative to `/` (rows are relative to the site dir, or absolute);
/// `None` for one that names nothing below `/`.
pub fn row_path(site: &str, row: &str) -> Option<String> {
    let p = match row.strip_prefix('/') {
        Some(abs) => fold(abs),
        None => fold(&join(site, row)),
    }?;
    (!p.is_empty()).then_some(p)
}

/// The rows of a dist's `RECORD` (none when it has none).
fn rows(dist: &Dist) -> Result<Vec<record::Row>, String> {
    match dist.files.get("RECORD") {
        Some(bytes) => record::parse(bytes, &format!("/{}/RECORD", dist.dir)),
        None => Ok(Vec::new()),
    }
}

/// Every path a dist's `RECORD` lists, relative to `/`.
pub fn record_paths(dist: &Dist) -> Result<Vec<String>, String> {
    let site = site_of(dist);
    Ok(rows(dist)?
        .iter()
        .filter_map(|r| row_path(site, &r.path))
        .collect())
}

/// The paths a dist's `RECORD` gives a sha256, relative to `/`, with `sha256:<hex>`.
pub fn hashed_paths(dist: &Dist) -> Result<Vec<(String, String)>, String> {
    let site = site_of(dist);
    Ok(rows(dist)?
        .iter()
        .filter_map(|r| {
            Some((
                row_path(site, &r.path)?,
                format!("sha256:{}", r.sha256_hex()?),
            ))
        })
        .collect())
}

/// The first file of `dist`'s `RECORD` whose visible bytes are not the ones it records, as a
/// line naming it (`None`: every hashed file is as recorded).
pub fn tampered(tree: &dyn Tree, dist: &Dist) -> Result<Option<String>, String> {
    if !dist.files.contains_key("RECORD") {
        return Ok(Some(format!("/{} has no RECORD", dist.dir)));
    }
    for (path, want) in hashed_paths(dist)? {
        let got = tree.hashed(&path).or_else(|| {
            let f = tree.file(&path).ok().flatten()?;
            Some(crate::digest::sha256(&f.content))
        });
        match got {
            Some(g) if g == want => {}
            Some(g) => return Ok(Some(format!("/{path} has {g}, its RECORD says {want}"))),
            None => return Ok(Some(format!("/{path}, listed in its RECORD, is not there"))),
        }
    }
    Ok(None)
}
