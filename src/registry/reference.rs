//! Transports in names, after skopeo: `oci:PATH` is an OCI layout directory, `docker://NAME` (or
//! a bare name) a registry repository; every other transport prefix is refused by name rather
//! than read as a registry host.

/// A repository name or reference that cannot be used, said in one sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(pub(crate) String);

/// What a name's transport prefix says it is.
pub(crate) enum Named<'a> {
    /// `oci:PATH...`: the rest after `oci:`.
    Layout(&'a str),
    /// A registry name, `docker://` taken off.
    Registry(&'a str),
}

/// Transports other tools name that this one does not read or write.
const OTHERS: &[&str] = &[
    "oci-archive",
    "docker-archive",
    "docker-daemon",
    "containers-storage",
    "dir",
    "ostree",
    "sif",
    "tarball",
    "oci-layout",
    "ocidir",
];

fn supported(input: &str, transport: &str) -> NameError {
    NameError(format!(
        "{input:?} names the {transport:?} transport, which runner-patch does not read or write; give a registry repository (HOST/NAME, or docker://HOST/NAME) or an OCI image layout directory (oci:PATH)"
    ))
}

/// What `input`'s transport prefix names; other tools' transports are refused by name.
pub(crate) fn transport(input: &str) -> Result<Named<'_>, NameError> {
    if let Some(rest) = input.strip_prefix("oci:") {
        return Ok(Named::Layout(rest));
    }
    if let Some(rest) = input.strip_prefix("docker://") {
        return Ok(Named::Registry(rest));
    }
    if let Some((scheme, _)) = input.split_once("://") {
        return Err(supported(input, scheme));
    }
    if let Some((prefix, _)) = input.split_once(':') {
        if OTHERS.contains(&prefix) {
            return Err(supported(input, prefix));
        }
    }
    Ok(Named::Registry(input))
}

/// Whether `tag` is a valid tag: 1 to 128 letters, digits, `.`, `_` and `-`.
pub(crate) fn valid_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 128
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}
