//! uv's words made fit for one error line and for records: its multi-line messages folded into
//! one, and any credentials in a URL (`scheme://user:token@host`) replaced by `***`.

/// Every `scheme://user[:token]@host` in `text` written `scheme://***@host`.
pub fn redact_all(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | ')' | '>')
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("***");
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `text`'s lines joined by one space each, blank ones and uv's interpreter notice dropped,
/// credentials redacted.
pub fn one_line(text: &str) -> String {
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Using CPython"))
        .collect();
    redact_all(&parts.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_never_shown() {
        assert_eq!(
            redact_all("index https://ci:s3cret@host.example/simple (401) and http://tok@h:1/x"),
            "index https://***@host.example/simple (401) and http://***@h:1/x"
        );
        assert_eq!(
            redact_all("plain https://host.example/a@b"),
            "plain https://host.example/a@b"
        );
        assert_eq!(
            one_line("Using CPython 3.11.2 interpreter at: /usr/bin/python3\nerror: No solution\n  cause: x\n\nhint: y https://u:p@h/simple\n"),
            "error: No solution cause: x hint: y https://***@h/simple"
        );
    }
}
