//! One scan cache entry on disk: the body (the layer, the key and what the scan found) as
//! JSON, written as a stream with kept contents in base64, then a last line holding the sha256
//! of the body's exact bytes; and reading one back, trusted only for its own layer and key.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::media::{Compression, Descriptor};
use crate::scan::{EntryKind, FileEntry, LayerScan};

/// Bumped whenever the entry layout or the meaning of a scan changes (3: the body, then its
/// checksum on the last line). Entries of an earlier
/// format are never read; their folder is removed by the first store of this one.
pub(super) const FORMAT: u64 = 3;

/// The biggest entry written or read: everything a complete scan of one layer may keep (its own
/// budget and all the distribution metadata a run may keep), as base64, plus its index. A
/// scan of any size that finished is cached; a bigger file is not one this tool wrote.
pub(super) const MAX_ENTRY_BYTES: u64 =
    (crate::scan::MAX_KEPT_PER_LAYER + crate::scan::MAX_DIST_KEPT_PER_RUN) * 3 / 2 + (1 << 20);

/// The compression's name as entries record it.
pub(super) fn compression_name(c: Compression) -> &'static str {
    match c {
        Compression::Gzip => "gzip",
        Compression::Zstd => "zstd",
        Compression::None => "none",
    }
}

fn kind_json(k: &EntryKind) -> Value {
    match k {
        EntryKind::Regular => json!({"regular": null}),
        EntryKind::Symlink(t) => json!({"symlink": t}),
        EntryKind::Hardlink(t) => json!({"hardlink": t}),
        EntryKind::Other(t) => json!({"other": t}),
    }
}

fn json_to(w: &mut dyn std::io::Write, v: &impl serde::Serialize) -> std::io::Result<()> {
    serde_json::to_writer(w, v).map_err(std::io::Error::other)
}

/// `"<base64 of bytes>"`, streamed (base64 needs no JSON escaping).
fn b64_to(w: &mut dyn std::io::Write, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(b"\"")?;
    {
        let mut enc =
            base64::write::EncoderWriter::new(&mut *w, &base64::engine::general_purpose::STANDARD);
        enc.write_all(bytes)?;
        enc.finish()?;
    }
    w.write_all(b"\"")
}

/// The entry: the body (layer, key, scan) as JSON, then a last line holding the sha256 of the
/// body's exact bytes. Written as a stream, so an entry holding megabytes of `RECORD`s costs
/// no copy of them in memory.
pub(super) fn encode_to(
    out: &mut dyn std::io::Write,
    desc: &Descriptor,
    compression: Compression,
    key: &str,
    scan: &LayerScan,
) -> std::io::Result<()> {
    let mut h = crate::digest::HashingWriter::new(out);
    let w: &mut dyn std::io::Write = &mut h;
    write!(w, "{{\"format\":{FORMAT},\"layer\":")?;
    json_to(w, &desc.digest)?;
    write!(
        w,
        ",\"size\":{},\"compression\":\"{}\",\"key\":",
        desc.size,
        compression_name(compression)
    )?;
    json_to(w, &key)?;
    w.write_all(b",\"scan\":{\"digest\":")?;
    json_to(w, &scan.digest)?;
    w.write_all(b",\"targets\":[")?;
    for (i, t) in scan.targets.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        let head = json!({
            "path": t.path, "kind": kind_json(&t.kind), "mode": t.mode, "uid": t.uid,
            "gid": t.gid, "uname": t.uname, "gname": t.gname, "mtime": t.mtime,
        })
        .to_string();
        // The header's fields, then the content: `{...,"content":"<base64>"}`.
        w.write_all(&head.as_bytes()[..head.len() - 1])?;
        w.write_all(b",\"content\":")?;
        b64_to(w, &t.content)?;
        w.write_all(b"}")?;
    }
    w.write_all(b"],\"pycs\":")?;
    json_to(w, &scan.pycs)?;
    w.write_all(b",\"files\":{")?;
    for (i, (p, c)) in scan.files.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        json_to(w, p)?;
        w.write_all(b":")?;
        b64_to(w, c)?;
    }
    let links: Vec<Value> = scan.links.iter().map(|(k, t)| json!([k, t])).collect();
    let rest = json!({
        "whiteouts": scan.whiteouts, "opaques": scan.opaques, "index": scan.index_keys(),
        "links": links, "dirs": scan.dirs, "pythons": scan.pythons, "refusal": scan.refusal,
        "kept": scan.kept, "compressed_bytes": scan.compressed_bytes,
    })
    .to_string();
    // The remaining fields after `files`: `},<fields>}}`.
    w.write_all(b"},")?;
    w.write_all(&rest.as_bytes()[1..])?;
    w.write_all(b"}")?;
    let (out, sum, len) = h.finish();
    if len > MAX_ENTRY_BYTES {
        return Err(std::io::Error::other(format!(
            "{len} bytes, more than an entry holds"
        )));
    }
    write!(out, "\n{sum}\n")
}

/// The entry as bytes (tests).
#[cfg(test)]
pub(super) fn encode(
    desc: &Descriptor,
    compression: Compression,
    key: &str,
    scan: &LayerScan,
) -> Vec<u8> {
    let mut out = Vec::new();
    encode_to(&mut out, desc, compression, key, scan).expect("an entry in memory");
    out
}

/// An entry's body, once its checksum, format, layer and key are those of this scan.
fn open_entry(
    bytes: &[u8],
    desc: &Descriptor,
    compression: Compression,
    key: &str,
) -> Result<Value, String> {
    let text = bytes.strip_suffix(b"\n").ok_or("no checksum line")?;
    let newline = text
        .iter()
        .rposition(|b| *b == b'\n')
        .ok_or("no checksum line")?;
    let (body, sum) = (&text[..newline], &text[newline + 1..]);
    if sum != crate::digest::sha256(body).as_bytes() {
        return Err("its checksum does not match its content".into());
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| "body is not JSON".to_owned())?;
    if v["format"].as_u64() != Some(FORMAT) {
        return Err(format!("format {} is not {FORMAT}", v["format"]));
    }
    if v["layer"].as_str() != Some(desc.digest.as_str())
        || v["size"].as_u64() != Some(desc.size)
        || v["compression"].as_str() != Some(compression_name(compression))
    {
        return Err(format!("it belongs to layer {}", v["layer"]));
    }
    if v["key"].as_str() != Some(key) {
        return Err("it was made for another patch".into());
    }
    Ok(v)
}

fn bad(what: &str) -> String {
    format!("malformed {what}")
}

fn text(x: &Value, what: &str) -> Result<String, String> {
    x.as_str().map(str::to_owned).ok_or_else(|| bad(what))
}

fn num(x: &Value, what: &str) -> Result<u64, String> {
    x.as_u64().ok_or_else(|| bad(what))
}

fn unb64(x: &Value, what: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(x.as_str().ok_or_else(|| bad(what))?)
        .map_err(|_| bad(what))
}

fn strings(x: &Value, what: &str) -> Result<Vec<String>, String> {
    x.as_array()
        .ok_or_else(|| bad(what))?
        .iter()
        .map(|e| text(e, what))
        .collect()
}

/// The kept entries of wanted files.
fn targets_of(s: &Value) -> Result<Vec<FileEntry>, String> {
    let mut targets = Vec::new();
    for t in s["targets"].as_array().ok_or_else(|| bad("targets"))? {
        let k = t["kind"].as_object().ok_or_else(|| bad("kind"))?;
        let kind = match k.iter().next() {
            Some((n, _)) if n == "regular" => EntryKind::Regular,
            Some((n, x)) if n == "symlink" => EntryKind::Symlink(text(x, "kind")?),
            Some((n, x)) if n == "hardlink" => EntryKind::Hardlink(text(x, "kind")?),
            Some((n, x)) if n == "other" => EntryKind::Other(text(x, "kind")?),
            _ => return Err(bad("kind")),
        };
        let opt = |x: &Value| x.as_str().map(str::to_owned);
        targets.push(FileEntry {
            path: text(&t["path"], "path")?,
            kind,
            mode: u32::try_from(num(&t["mode"], "mode")?).map_err(|_| bad("mode"))?,
            uid: num(&t["uid"], "uid")?,
            gid: num(&t["gid"], "gid")?,
            uname: opt(&t["uname"]),
            gname: opt(&t["gname"]),
            mtime: num(&t["mtime"], "mtime")?,
            content: Arc::new(unb64(&t["content"], "content")?),
        });
    }
    Ok(targets)
}

/// A sorted list of numbers (an index of hashed paths); absent: empty.
fn sorted_keys(x: &Value, what: &str) -> Result<Vec<u64>, String> {
    let keys: Vec<u64> = x
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|k| num(k, what))
        .collect::<Result<_, _>>()?;
    keys.windows(2)
        .all(|w| w[0] <= w[1])
        .then_some(keys)
        .ok_or_else(|| bad(what))
}

/// Reads an entry back; `Err` names why it cannot be trusted for this layer and key.
pub(super) fn decode(
    bytes: &[u8],
    desc: &Descriptor,
    compression: Compression,
    key: &str,
) -> Result<LayerScan, String> {
    let v = open_entry(bytes, desc, compression, key)?;
    let s = &v["scan"];
    let targets = targets_of(s)?;
    let mut files = BTreeMap::new();
    for (p, c) in s["files"].as_object().ok_or_else(|| bad("files"))? {
        files.insert(p.clone(), Arc::new(unb64(c, "files")?));
    }
    let compressed_bytes = num(&s["compressed_bytes"], "compressed_bytes")?;
    if compressed_bytes != desc.size || s["digest"].as_str() != Some(desc.digest.as_str()) {
        return Err(bad("layer fields"));
    }
    let kept = num(&s["kept"], "kept")?;
    let index = sorted_keys(&s["index"], "index")?;
    let refusal = match &s["refusal"] {
        Value::Null => None,
        r => Some(text(r, "refusal")?),
    };
    let mut scan = LayerScan::default();
    scan.digest = desc.digest.clone();
    scan.targets = targets;
    scan.pycs = strings(&s["pycs"], "pycs")?.into_iter().collect();
    scan.files = files;
    scan.whiteouts = strings(&s["whiteouts"], "whiteouts")?.into_iter().collect();
    scan.opaques = strings(&s["opaques"], "opaques")?.into_iter().collect();
    scan.set_index_keys(index);
    // What a scan for exact paths keeps to resolve links (scan::links).
    for pair in s["links"].as_array().map(Vec::as_slice).unwrap_or_default() {
        scan.links
            .insert(num(&pair[0], "links")?, text(&pair[1], "links")?);
    }
    scan.dirs = sorted_keys(&s["dirs"], "dirs")?;
    for m in s["pythons"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        scan.pythons
            .insert(u32::try_from(num(m, "pythons")?).map_err(|_| bad("pythons"))?);
    }
    scan.refusal = refusal;
    scan.kept = kept;
    scan.compressed_bytes = compressed_bytes;
    Ok(scan)
}
