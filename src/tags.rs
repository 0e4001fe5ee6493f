//! The distribution spec's tag grammar, checked before any network traffic so that a name the
//! registry would refuse (a suffix making a tag too long, say) is caught before blobs are pushed.

/// The longest tag the distribution spec allows.
pub const MAX_LEN: usize = 128;

/// Checks `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
pub fn check(tag: &str) -> Result<(), String> {
    let first_ok = tag
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    if !first_ok
        || !tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(format!(
            "tag {tag:?} is not a valid tag (letters, digits, '_', '.', '-'; not starting with '.' or '-')"
        ));
    }
    if tag.len() > MAX_LEN {
        return Err(format!(
            "tag {tag:?} is {} characters long; registries accept at most {MAX_LEN}",
            tag.len()
        ));
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
    fn grammar() {
        assert!(check("cuda12.9-vllm0.27.1").is_ok());
        assert!(check("_x").is_ok());
        assert!(check("").is_err());
        assert!(check("-x").is_err());
        assert!(check(".x").is_err());
        assert!(check("a/b").is_err());
        assert!(check(&"a".repeat(128)).is_ok());
        let long = check(&"a".repeat(129)).unwrap_err();
        assert!(long.contains("129 characters"), "{long}");
    }
}
