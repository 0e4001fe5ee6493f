//! Release versions and ranges, just enough of PEP 440 to place a vLLM build in a patch's
//! affected range: the numeric release part decides; local tags (`+cu129`) are ignored and
//! pre-releases (`0.33.0rc1`) sort before their release.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Deserializer};

/// A parsed version: release numbers plus whether it is a pre-release or dev build.
#[derive(Debug, Clone)]
pub struct Version {
    release: Vec<u64>,
    pre: bool,
    text: String,
}

impl Version {
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let public = t.split('+').next().unwrap_or(t);
        let mut release = Vec::new();
        let mut rest = public;
        loop {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if digits.is_empty() {
                break;
            }
            release.push(digits.parse().ok()?);
            rest = &rest[digits.len()..];
            match rest.strip_prefix('.') {
                Some(r) if r.starts_with(|c: char| c.is_ascii_digit()) => rest = r,
                _ => break,
            }
        }
        if release.is_empty() {
            return None;
        }
        let rest = rest.trim_start_matches('.');
        let pre = [
            "a", "b", "rc", "dev", "alpha", "beta", "c", "pre", "preview",
        ]
        .iter()
        .any(|p| rest.starts_with(p));
        Some(Version {
            release,
            pre,
            text: t.to_owned(),
        })
    }

    fn key(&self) -> (Vec<u64>, bool) {
        let mut r = self.release.clone();
        while r.len() > 1 && r.last() == Some(&0) {
            r.pop();
        }
        (r, !self.pre)
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Version {}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A version range that cannot be read; the text names the clause.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

/// A conjunction of `>=`, `>`, `<`, `<=`, `==` clauses, as in `">=0.11.1, <0.33.0"`.
#[derive(Debug, Clone)]
pub struct VersionRange {
    clauses: Vec<(String, Version)>,
    text: String,
}

impl VersionRange {
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut clauses = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let op_len = part
                .find(|c: char| c.is_ascii_digit() || c == 'v')
                .ok_or_else(|| Error(format!("version clause {part:?} has no version")))?;
            let (op, ver) = part.split_at(op_len);
            let op = op.trim();
            if !matches!(op, ">=" | ">" | "<" | "<=" | "==") {
                return Err(Error(format!(
                    "version clause {part:?}: unknown operator {op:?}"
                )));
            }
            let v = Version::parse(ver)
                .ok_or_else(|| Error(format!("version clause {part:?}: bad version")))?;
            clauses.push((op.to_owned(), v));
        }
        if clauses.is_empty() {
            return Err(Error("empty version range".into()));
        }
        Ok(VersionRange {
            clauses,
            text: text.to_owned(),
        })
    }

    pub fn contains(&self, v: &Version) -> bool {
        self.clauses.iter().all(|(op, bound)| match op.as_str() {
            ">=" => v >= bound,
            ">" => v > bound,
            "<" => v < bound,
            "<=" => v <= bound,
            _ => v == bound,
        })
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for VersionRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        VersionRange::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).expect("version parses")
    }

    #[test]
    fn range_bounds() {
        let r = VersionRange::parse(">=0.11.1, <0.33.0").expect("range");
        assert!(!r.contains(&v("0.11.0")));
        assert!(r.contains(&v("0.11.1")));
        assert!(r.contains(&v("0.27.1+cu129")));
        assert!(r.contains(&v("0.32.0")));
        assert!(r.contains(&v("0.33.0rc1")));
        assert!(!r.contains(&v("0.33.0")));
        assert!(!r.contains(&v("0.33.1")));
        assert!(v("0.20") == v("0.20.0"));
    }
}
