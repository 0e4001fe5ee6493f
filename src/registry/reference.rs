//! Transports in names, after skopeo: `oci:PATH` is an OCI layout directory, `docker://NAME` (or
//! a bare name) a registry repository; every other transport prefix is refused by name rather
//! than read as a registry host.

use oci_spec::distribution::Reference;

use super::Repo;

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

fn supported(input: &str, transport: &str) -> String {
    format!(
        "{input:?} names the {transport:?} transport, which runner-patch does not read or write; give a registry repository (HOST/NAME, or docker://HOST/NAME) or an OCI image layout directory (oci:PATH)"
    )
}

pub(crate) fn transport(input: &str) -> Result<Named<'_>, String> {
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

impl Repo {
    /// An OCI layout directory named `oci:PATH` (`input`), for `--repository` and
    /// `--target-repository`: the path as given (relative to the working directory), with no
    /// `:` (which would name a tag: tags go in `--tag`).
    pub(crate) fn layout(input: &str, path: &str) -> Result<Repo, String> {
        if path.is_empty() {
            return Err(format!("{input:?} names no directory (oci:PATH)"));
        }
        if path.contains(':') {
            return Err(format!(
                "{input:?} names a tag (after the last ':'); give the layout directory only (tags go in --tag; a directory whose name holds ':' cannot be named here)"
            ));
        }
        Ok(Repo {
            registry: String::new(),
            repository: format!("oci:{path}"),
        })
    }
}

/// `oci:PATH:TAG` split at the last colon, as skopeo does (so PATH may hold colons), or
/// `oci:PATH@sha256:HEX`.
pub(crate) fn layout_reference(input: &str) -> Result<(Repo, Reference), String> {
    let rest = input.strip_prefix("oci:").unwrap_or(input);
    let repo_of = |path: &str| {
        if path.is_empty() {
            return Err(format!("{input:?} names no directory (oci:PATH:TAG)"));
        }
        Ok(Repo {
            registry: String::new(),
            repository: format!("oci:{path}"),
        })
    };
    if let Some((path, digest)) = rest.rsplit_once('@') {
        if crate::digest::is_sha256(digest) {
            let repo = repo_of(path)?;
            let r = repo.at_digest(digest);
            return Ok((repo, r));
        }
    }
    let Some((path, tag)) = rest.rsplit_once(':') else {
        return Err(format!(
            "{input:?} names no tag (oci:PATH:TAG; the tag follows the last ':')"
        ));
    };
    if tag.is_empty()
        || tag.len() > 128
        || !tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(format!("{input:?}: {tag:?} is not a valid tag"));
    }
    let repo = repo_of(path)?;
    let r = repo.at_tag(tag);
    Ok((repo, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_are_split_as_skopeo_names_them() {
        let r = Repo::parse("oci:some/dir").expect("layout");
        assert_eq!(r.layout_path(), Some("some/dir"));
        assert_eq!(r.to_string(), "oci:some/dir");
        assert_eq!(r.at_tag("t1").whole(), "oci:some/dir:t1");
        assert!(Repo::parse("oci:dir:tag").is_err() && Repo::parse("oci:").is_err());
        let (repo, r) = Repo::parse_reference("oci:/tmp/a:b/dir:t1").expect("ref");
        assert_eq!(
            (repo.layout_path(), r.tag()),
            (Some("/tmp/a:b/dir"), Some("t1"))
        );
        let d = format!("sha256:{}", "a".repeat(64));
        let (repo, r) = Repo::parse_reference(&format!("oci:x@{d}")).expect("digest");
        assert_eq!(
            (repo.layout_path(), r.digest()),
            (Some("x"), Some(d.as_str()))
        );
        assert!(Repo::parse_reference("oci:dir").is_err());
        // A map names a layout as oci:PATH:TAG; it reads back to the same repository.
        let back = Repo::parse_reference(&repo.at_tag("t").whole()).expect("back");
        assert_eq!(back.0, repo);
        // docker:// is the registry transport; host:port still names a registry.
        let r = Repo::parse("docker://127.0.0.1:5000/a/b").expect("docker://");
        assert_eq!(
            (r.registry.as_str(), r.layout_path()),
            ("127.0.0.1:5000", None)
        );
        assert!(Repo::parse("localhost:5000/a").is_ok());
        for other in [
            "oci-archive:x.tar",
            "dir:/tmp/x",
            "docker-archive:x.tar",
            "containers-storage:x",
            "ocidir://x",
            "oci-layout://x",
        ] {
            let e = Repo::parse(other).expect_err(other);
            assert!(e.contains("transport") && e.contains("oci:PATH"), "{e}");
            assert!(Repo::parse_reference(&format!("{other}:t")).is_err());
        }
    }
}
