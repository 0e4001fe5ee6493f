//! A distribution's `RECORD` (PEP 376 / the binary distribution format): CSV rows of
//! `path,hash,size`, read from a wheel or an installed dist, and written as pip writes it
//! (rows sorted, fields quoted only when they must be, `\r\n` line ends, `sha256=` urlsafe
//! base64 without padding), so the installed `RECORD` is the one pip would leave.

use base64::Engine;

/// One row: the path (relative to the site dir), the hash field as written (`sha256=...` or
/// empty) and the size as written (empty for `RECORD` itself).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    pub path: String,
    pub hash: String,
    pub size: String,
}

impl Row {
    /// A row for bytes of `size` with the hex sha256 `hex`.
    pub fn new(path: String, hex: &str, size: u64) -> Result<Row, String> {
        Ok(Row {
            path,
            hash: format!("sha256={}", b64_of_hex(hex)?),
            size: size.to_string(),
        })
    }

    /// The hex sha256 the row names, `None` when it names none (or another algorithm).
    pub fn sha256_hex(&self) -> Option<String> {
        let b64 = self.hash.strip_prefix("sha256=")?;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(b64.trim_end_matches('='))
            .ok()?;
        (raw.len() == 32).then(|| hex::encode(raw))
    }

    /// The size the row names, when it names one.
    pub fn size(&self) -> Option<u64> {
        self.size.parse().ok()
    }
}

/// `sha256=` field text for a hex digest: urlsafe base64, no padding.
pub fn b64_of_hex(hex_digest: &str) -> Result<String, String> {
    let raw = hex::decode(hex_digest).map_err(|_| format!("{hex_digest:?} is not a hex sha256"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw))
}

/// Splits one CSV record (Python's `csv` excel dialect: `"` quotes, `""` inside quotes).
fn fields(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut started = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            (true, '"') => quoted = false,
            (false, '"') if !started => {
                quoted = true;
                started = true;
            }
            (false, ',') => {
                out.push(std::mem::take(&mut cur));
                started = false;
            }
            (_, c) => {
                cur.push(c);
                started = true;
            }
        }
    }
    if quoted {
        return Err("a quoted field is not closed".to_owned());
    }
    out.push(cur);
    Ok(out)
}

/// Parses a `RECORD`; `origin` names it in errors (`<wheel>!a-1.0.dist-info/RECORD`).
pub fn parse(bytes: &[u8], origin: &str) -> Result<Vec<Row>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{origin} is not UTF-8 text"))?;
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        let f = fields(line).map_err(|e| format!("{origin}:{}: {e}", n + 1))?;
        if f.len() > 3 || f[0].is_empty() {
            return Err(format!(
                "{origin}:{}: a row is `path,hash,size`, not {line:?}",
                n + 1
            ));
        }
        let get = |i: usize| f.get(i).cloned().unwrap_or_default();
        rows.push(Row {
            path: get(0),
            hash: get(1),
            size: get(2),
        });
    }
    Ok(rows)
}

/// One field as Python's csv writer gives it (quoted when it holds `,`, `"` or a line end).
fn quote(field: &str) -> String {
    if field.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}

/// The `RECORD` text pip writes for these rows: sorted, `\r\n` after each.
pub fn write(rows: &[Row]) -> Vec<u8> {
    let mut sorted = rows.to_vec();
    sorted.sort();
    let mut out = String::new();
    for r in &sorted {
        out.push_str(&format!(
            "{},{},{}\r\n",
            quote(&r.path),
            quote(&r.hash),
            quote(&r.size)
        ));
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_as_pip_writes_them() {
        let text = b"a/__init__.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n\"b,c.py\",sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\na-1.0.dist-info/RECORD,,\n";
        let rows = parse(text, "RECORD").expect("parses");
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].path, "b,c.py");
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(rows[0].sha256_hex().as_deref(), Some(empty));
        assert_eq!(rows[0].size(), Some(0));
        assert_eq!(rows[2].sha256_hex(), None);
        let written = String::from_utf8(write(&rows)).expect("utf-8");
        assert_eq!(
            written,
            "a-1.0.dist-info/RECORD,,\r\na/__init__.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\r\n\"b,c.py\",sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\r\n"
        );
        assert_eq!(
            Row::new("x".into(), empty, 0).expect("row").hash,
            "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
        );
        assert!(parse(b"a,b,c,d\n", "R").is_err());
        assert!(parse(b"\"a,b\n", "R").is_err());
    }
}
