//! The layer builder alone, for the wheels bench (`bench/wheels.py`): builds the layer of every
//! entry of a wheel as `Change::Stream` files whose opener inflates the entry from the wheel on
//! disk (what the `wheels` kind hands the builder), so it is spooled to `TMPDIR` as `apply`
//! spools it; then copies the blob out for the bench to check.
//!
//!     layer_bench ENTRIES.json WHEEL OUT
//!
//! ENTRIES.json: `[{"path", "offset", "csize", "size", "sha256", "mode"}]`, where `offset` is an
//! entry's data in the zip (past its local header) and `csize` its deflated size. Prints one JSON
//! line: the build's seconds, digest, diff_id, size and whether it was spooled.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Instant;

use runner_patch::layer::build_changes;
use runner_patch::patch::{Change, Streamed};
use runner_patch::scan::{EntryKind, FileEntry};
use serde_json::{json, Value};

fn field(e: &Value, k: &str) -> Result<u64, String> {
    e[k].as_u64()
        .ok_or_else(|| format!("entry {e} has no number {k:?}"))
}

/// One entry of the wheel, inflated from the file each time the builder opens it.
fn change(wheel: &Arc<String>, e: &Value) -> Result<Change, String> {
    let path = e["path"].as_str().ok_or("an entry has no path")?.to_owned();
    let (offset, csize) = (field(e, "offset")?, field(e, "csize")?);
    let wheel = wheel.clone();
    let open = Arc::new(move || {
        let mut f = File::open(wheel.as_str())?;
        f.seek(SeekFrom::Start(offset))?;
        let raw = std::io::BufReader::with_capacity(256 << 10, f.take(csize));
        Ok(Box::new(flate2::read::DeflateDecoder::new(raw)) as Box<dyn Read + Send>)
    });
    let mode = u32::try_from(field(e, "mode")?).map_err(|_| "mode out of range")?;
    Ok(Change::Stream(Box::new(Streamed {
        entry: FileEntry {
            path,
            kind: EntryKind::Regular,
            mode,
            uid: 0,
            gid: 0,
            uname: None,
            gname: None,
            mtime: 1_700_000_000,
            content: Arc::new(Vec::new()),
        },
        size: field(e, "size")?,
        sha256: e["sha256"]
            .as_str()
            .ok_or("an entry has no sha256")?
            .to_owned(),
        open,
    })))
}

fn run(args: &[String]) -> Result<Value, String> {
    let [_, entries, wheel, out] = args else {
        return Err("usage: layer_bench ENTRIES.json WHEEL OUT".into());
    };
    let text = std::fs::read(entries).map_err(|e| format!("{entries}: {e}"))?;
    let list: Vec<Value> = serde_json::from_slice(&text).map_err(|e| format!("{entries}: {e}"))?;
    let wheel = Arc::new(wheel.clone());
    let changes = list
        .iter()
        .map(|e| change(&wheel, e))
        .collect::<Result<Vec<_>, _>>()?;
    let start = Instant::now();
    let layer = build_changes(
        &changes,
        1_700_000_000,
        "application/vnd.oci.image.layer.v1.tar+gzip",
    )
    .map_err(|e| e.to_string())?;
    let built = start.elapsed().as_secs_f64();
    let mut dest = File::create(out).map_err(|e| format!("{out}: {e}"))?;
    std::io::copy(&mut layer.blob.reader(), &mut dest).map_err(|e| format!("{out}: {e}"))?;
    Ok(json!({
        "build_seconds": built,
        "digest": layer.digest,
        "diff_id": layer.diff_id,
        "size": layer.size(),
        "spooled": layer.blob.is_spooled(),
        "entries": changes.len(),
    }))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("layer_bench: {e}");
            std::process::exit(2);
        }
    }
}
