//! Tags: the distribution spec's grammar, checked before any network traffic so that a name the
//! registry would refuse (a suffix making a tag too long, say) is caught before blobs are pushed;
//! and the runner project's tag scheme (`cuda12.9-vllm0.27.1`), which says what a patch is for.

use crate::patch::Patch;
use crate::version::Version;

/// What a runner tag names: `cuda12.9-vllm0.27.1` is backend `cuda`, service `vllm` 0.27.1;
/// `cann9.0-910b-vllm0.20.2` is backend `cann`; a `-dev` suffix marks a development tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerTag {
    pub backend: String,
    pub service: String,
    /// The service's version, when the rest of the tag is one (per-platform companions
    /// `...-linux-amd64` have none).
    pub version: Option<Version>,
    pub dev: bool,
}

impl RunnerTag {
    /// Parses a runner tag; `None` for a tag of another form.
    pub fn parse(tag: &str) -> Option<Self> {
        let backend: String = tag.chars().take_while(char::is_ascii_lowercase).collect();
        if backend.is_empty() || !tag[backend.len()..].starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        // The service part: `-<letters><version>` after the backend (and its variant, `910b`).
        let mut offset = 0;
        let mut found = None;
        for (i, part) in tag.split('-').enumerate() {
            let name: String = part.chars().take_while(char::is_ascii_lowercase).collect();
            // A service is letters then a dotted version (`vllm0.20.2`); a variant such as
            // `a3` or `910b` is not one.
            let rest = &part[name.len()..];
            if i > 0
                && !name.is_empty()
                && rest.starts_with(|c: char| c.is_ascii_digit())
                && rest.contains('.')
            {
                found = Some((offset + name.len(), name));
                break;
            }
            offset += part.len() + 1;
        }
        let (start, service) = found?;
        let rest = &tag[start..];
        let (rest, dev) = match rest.strip_suffix("-dev") {
            Some(v) => (v, true),
            None => (rest, false),
        };
        let version = rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.')
            .then(|| Version::parse(rest))
            .flatten();
        Some(RunnerTag {
            backend,
            service,
            version,
            dev,
        })
    }
}

/// Why `patch` is not for `tag` (its services or backends exclude it); `None` when it is, or
/// when the tag is not a runner tag, which no selection excludes.
pub fn excludes(patch: &Patch, tag: &str) -> Option<String> {
    let meta = patch.meta();
    let t = RunnerTag::parse(tag)?;
    if !meta.for_service(&t.service) {
        return Some(format!(
            "patch {} is for services {} and {tag} is {}",
            meta.id,
            meta.services.join(", "),
            t.service
        ));
    }
    if !meta.for_backend(&t.backend) {
        return Some(format!(
            "patch {} is for backends {} and {tag} is {}",
            meta.id,
            meta.backends.join(", "),
            t.backend
        ));
    }
    None
}

/// Whether tag discovery keeps `tag` for a run on `backend`: a multi-arch runner tag of that
/// backend (not a companion, not `-dev` unless asked) that some patch is for, whose service
/// version is in the patch's range when the patch's package is that service.
pub fn discovers(patches: &[Patch], backend: &str, tag: &str, include_dev: bool) -> bool {
    let Some(t) = RunnerTag::parse(tag) else {
        return false;
    };
    let Some(version) = &t.version else {
        return false;
    };
    t.backend == backend
        && (include_dev || !t.dev)
        && patches.iter().any(|p| {
            let m = p.meta();
            excludes(p, tag).is_none()
                && match (&m.package, &m.affected) {
                    (Some(pkg), Some(range)) if *pkg == t.service => range.contains(version),
                    _ => true,
                }
        })
}

/// A tag the distribution spec's grammar refuses; the text names it and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

/// The longest tag the distribution spec allows.
pub const MAX_LEN: usize = 128;

/// Checks `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
pub fn check(tag: &str) -> Result<(), Error> {
    let first_ok = tag
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    if !first_ok
        || !tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(Error(format!(
            "tag {tag:?} is not a valid tag (letters, digits, '_', '.', '-'; not starting with '.' or '-')"
        )));
    }
    if tag.len() > MAX_LEN {
        return Err(Error(format!(
            "tag {tag:?} is {} characters long; registries accept at most {MAX_LEN}",
            tag.len()
        )));
    }
    Ok(())
}

/// `linux/arm64/v8` -> `linux-arm64`: the suffix of the runner project's per-platform
/// companion tags (`<tag>-linux-arm64`).
pub fn companion_suffix(platform: &str) -> String {
    platform.split('/').take(2).collect::<Vec<_>>().join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_tags_parse() {
        let t = |s| {
            RunnerTag::parse(s).map(|t| {
                (
                    t.backend,
                    t.service,
                    t.version.map(|v| v.to_string()),
                    t.dev,
                )
            })
        };
        assert_eq!(
            t("cuda12.9-vllm0.27.1"),
            Some(("cuda".into(), "vllm".into(), Some("0.27.1".into()), false))
        );
        assert_eq!(
            t("cuda12.9-vllm0.27.1-dev"),
            Some(("cuda".into(), "vllm".into(), Some("0.27.1".into()), true))
        );
        assert_eq!(
            t("cann9.0-910b-vllm0.20.2"),
            Some(("cann".into(), "vllm".into(), Some("0.20.2".into()), false))
        );
        assert_eq!(
            t("cuda12.9-sglang0.5.8"),
            Some(("cuda".into(), "sglang".into(), Some("0.5.8".into()), false))
        );
        assert_eq!(t("cuda12.9-vllm0.27.1-linux-amd64").and_then(|x| x.2), None);
        assert_eq!(t("latest"), None);
        assert_eq!(
            t("cann9.0-a3-vllm0.20.2"),
            Some(("cann".into(), "vllm".into(), Some("0.20.2".into()), false))
        );
    }

    #[test]
    fn grammar() {
        assert!(check("cuda12.9-vllm0.27.1").is_ok());
        assert!(check("_x").is_ok());
        assert!(check("").is_err());
        assert!(check("-x").is_err());
        assert!(check(".x").is_err());
        assert!(check("a/b").is_err());
        assert!(check(&"a".repeat(128)).is_ok());
        let long = check(&"a".repeat(129)).unwrap_err().to_string();
        assert!(long.contains("129 characters"), "{long}");
    }
}
