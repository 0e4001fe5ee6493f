//! A record as text for people: what `apply` and `plan` print per image (`--json` prints the
//! map itself). The library never prints; the binary writes these lines where it wants them.

use crate::digest_map::schema::ImageRecord;
use crate::units::human;

fn short(d: &str) -> String {
    d.strip_prefix("sha256:").map_or(d.to_owned(), |h| {
        format!("sha256:{}", &h[..12.min(h.len())])
    })
}

impl ImageRecord {
    /// The image's outcome, digests, target, platforms, provenance, signatures and companions,
    /// one line each under its source.
    pub fn text(&self) -> String {
        image_text(self)
    }
}

fn image_text(rec: &ImageRecord) -> String {
    let digest = match &rec.patched_digest {
        Some(p) if *p != rec.original_digest => {
            format!("{} -> {}", short(&rec.original_digest), short(p))
        }
        _ => short(&rec.original_digest),
    };
    let mut row = format!("{}\n  {:<16} {}", rec.source, rec.outcome, digest);
    if rec.target != rec.source {
        row.push_str(&format!("\n  {:<16} {}", "target", rec.target));
    }
    for p in &rec.platforms {
        row.push_str(&format!(
            "\n  {:<16} {:<16} vllm {:<10} scan {:>10}  push {:>8}  {}",
            p.platform,
            p.outcome.as_str(),
            p.vllm_version.as_deref().unwrap_or("?"),
            human(p.bytes_scanned),
            human(p.bytes_to_push),
            p.reason
        ));
        for w in &p.warnings {
            row.push_str(&format!("\n  {:<16} {:<16} {w}", p.platform, "warning"));
        }
    }
    row.push_str(&provenance_lines(rec));
    for c in &rec.companions {
        let state = if c.moved {
            "moved"
        } else if c.patched_digest.is_some() {
            "to move"
        } else {
            "unchanged"
        };
        row.push_str(&format!(
            "\n  {:<16} {:<16} {}",
            c.platform, state, c.target
        ));
    }
    row
}

/// An image's provenance artifacts and the source's signatures.
fn provenance_lines(rec: &ImageRecord) -> String {
    let mut out = String::new();
    for p in &rec.platforms {
        if let Some(prov) = &p.provenance {
            let state = match (&prov.attached_via, prov.attached) {
                (None, _) => "would attach".to_owned(),
                (Some(via), true) => format!("attached ({via})"),
                (Some(via), false) => format!("already attached ({via})"),
            };
            out.push_str(&format!(
                "\n  {:<16} provenance       {state} {}",
                p.platform, prov.digest
            ));
        }
    }
    for s in &rec.signatures {
        out.push_str(&format!(
            "\n  {:<16} {} {} covers the original {}, not the patched {} (not moved)",
            "signature",
            s.kind,
            s.reference,
            s.covers,
            s.not_covering.as_deref().unwrap_or("image")
        ));
    }
    out
}
