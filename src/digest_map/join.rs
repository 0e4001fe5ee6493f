//! Joining the digest maps of a run split in shards (`runner-patch join`): the jobs of a
//! pipeline matrix each apply their share of the tags (`apply --shard K/N`) and keep their own
//! map; the last job joins them into the one map that `verify` and `rollback` read. A tag two
//! of the maps record is an error, never a choice between them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::digest_map::error::Error;
use crate::digest_map::recorder::Recorder;
use crate::digest_map::schema::{DigestMap, ImageRecord};

/// What a join wrote: the map as it stands, and how many records each input gave.
#[derive(Debug)]
pub struct Joined {
    pub map: DigestMap,
    pub from: Vec<(PathBuf, usize)>,
}

/// Merges the maps at `inputs` into the map at `out` (created, or merged into as `apply`
/// merges: an original once recorded is never replaced), each input's records in its order,
/// the inputs in the order given. Every input must record the same patch (and `out`, when it
/// exists), and no tag may be the target of records in two inputs (shards never share a
/// tag); either is refused before anything is written.
pub fn join(out: &Path, inputs: &[PathBuf]) -> Result<Joined, Error> {
    let Some(first) = inputs.first() else {
        return Err(Error::Invalid("no digest map to join".into()));
    };
    let maps: Vec<DigestMap> = inputs
        .iter()
        .map(|p| DigestMap::read(p))
        .collect::<Result<_, _>>()?;
    let patch = maps[0].patch.clone();
    let mut owner: HashMap<&str, &Path> = HashMap::new();
    for (path, map) in inputs.iter().zip(&maps) {
        if map.patch != patch {
            return Err(Error::OtherPatch(format!(
                "digest map {} records patch {:?} and {} records {:?}; only maps of one patch join",
                first.display(),
                patch,
                path.display(),
                map.patch
            )));
        }
        for rec in &map.images {
            match owner.get(rec.target.as_str()) {
                Some(other) if *other != path.as_path() => {
                    return Err(Error::Conflict(format!(
                        "tag {} is recorded by both {} and {}: shards must not share a tag (was the same --shard given twice, or the tags split another way?)",
                        rec.target,
                        other.display(),
                        path.display()
                    )))
                }
                _ => {
                    owner.insert(&rec.target, path);
                }
            }
        }
    }
    let recorder = Recorder::open(out, &patch)?;
    let from: Vec<(PathBuf, usize)> = inputs
        .iter()
        .zip(&maps)
        .map(|(p, m)| (p.clone(), m.images.len()))
        .collect();
    let records: Vec<ImageRecord> = maps.into_iter().flat_map(|m| m.images).collect();
    recorder.record_all(records)?;
    let map = recorder.snapshot().ok_or_else(|| {
        Error::Io(format!(
            "digest map {} could not be read back",
            out.display()
        ))
    })?;
    Ok(Joined { map, from })
}
