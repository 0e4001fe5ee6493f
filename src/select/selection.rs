//! The one selection of a run's tags, fed by `--tag`, by a matrix (`--matrix`) or by
//! discovery of a backend's affected tags, then cut to a shard's share; each tag selected
//! becomes a [`Job`] with the platforms to patch. Everything but discovery is checked when the
//! selection is made, before any registry request.

use std::path::Path;

use crate::patch::Patch;
use crate::registry::{Registry, Repo};
use crate::select::error::Error;
use crate::select::matrix::Matrix;
use crate::select::platforms::Platforms;
use crate::select::shard::Shard;

/// What a run asks for, as given.
#[derive(Debug, Clone, Copy, Default)]
pub struct Request<'a> {
    /// The backend: the only one discovery looks for and explicit tags may be of; with a
    /// matrix, the only one whose rules are taken.
    pub backend: Option<&'a str>,
    /// Explicit tags; with a matrix, they narrow its tags to these.
    pub tags: &'a [String],
    pub matrix: Option<&'a Path>,
    /// Discovery takes `-dev` tags too.
    pub include_dev: bool,
    /// Appended to each tag for the patched image's name.
    pub tag_suffix: &'a str,
    /// `K/N`: only the tags of that shard.
    pub shard: Option<&'a str>,
}

/// One tag selected and the platforms of it to patch (`None`: every one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    pub tag: String,
    pub platforms: Option<Platforms>,
}

/// One source tag, the name its patched image gets, and the platforms of it to patch (the
/// others keep their manifests in the new index).
#[derive(Debug, Clone)]
pub struct Job {
    pub source: Repo,
    pub tag: String,
    pub target: Repo,
    pub target_tag: String,
    pub platforms: Option<Platforms>,
}

/// A request checked: the tags it names (or discovery), the suffix and the shard.
#[derive(Debug, Clone)]
pub struct Selection {
    given: Option<Vec<Selected>>,
    backend: Option<String>,
    include_dev: bool,
    suffix: String,
    shard: Option<Shard>,
}

impl Selection {
    /// Checks a request and reads its matrix; no registry is touched.
    pub fn new(req: &Request<'_>) -> Result<Self, Error> {
        let suffix_ok = req
            .tag_suffix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !suffix_ok {
            return Err(Error::Request(format!(
                "--tag-suffix {:?} may hold only letters, digits, '.', '_' and '-'",
                req.tag_suffix
            )));
        }
        // The same tag given twice is one image (and one record).
        let mut explicit: Vec<String> = Vec::new();
        for t in req.tags {
            if !explicit.contains(t) {
                explicit.push(t.clone());
            }
        }
        let given = match (req.matrix, req.backend) {
            (Some(path), backend) => Some(from_matrix(&Matrix::read(path)?, backend, &explicit)?),
            (None, Some(backend)) if !explicit.is_empty() => {
                let mut given = Vec::new();
                for tag in explicit {
                    check_tag(backend, &tag)?;
                    given.push(Selected {
                        tag,
                        platforms: None,
                    });
                }
                Some(given)
            }
            (None, Some(_)) => None,
            (None, None) => {
                return Err(Error::Request(
                    "--backend is needed without --matrix".into(),
                ))
            }
        };
        for s in given.iter().flatten() {
            check_target_tag(&s.tag, req.tag_suffix)?;
        }
        Ok(Selection {
            given,
            backend: req.backend.map(str::to_owned),
            include_dev: req.include_dev,
            suffix: req.tag_suffix.to_owned(),
            shard: req.shard.map(Shard::parse).transpose()?,
        })
    }

    /// The tags named before any request (`None`: discovery finds them), before the shard.
    pub fn given(&self) -> Option<&[Selected]> {
        self.given.as_deref()
    }

    /// The tags to patch: those given, else those discovery finds in `repo`; then a shard's
    /// share of them (none is no reason to look for more).
    pub async fn resolve(
        &self,
        reg: &Registry,
        repo: &Repo,
        patches: &[Patch],
    ) -> Result<Vec<Selected>, Error> {
        let all = match (&self.given, &self.backend) {
            (Some(given), _) => given.clone(),
            (None, Some(backend)) => {
                let found = discover(reg, repo, backend, patches, self.include_dev).await?;
                let mut all = Vec::new();
                for tag in found {
                    check_target_tag(&tag, &self.suffix)?;
                    all.push(Selected {
                        tag,
                        platforms: None,
                    });
                }
                all
            }
            (None, None) => Vec::new(),
        };
        Ok(match self.shard {
            Some(shard) => shard.select(all, |s| s.tag.as_str()),
            None => all,
        })
    }

    /// The jobs of the selected tags, from `source` to `target`.
    pub fn jobs(&self, selected: Vec<Selected>, source: &Repo, target: &Repo) -> Vec<Job> {
        selected
            .into_iter()
            .map(|s| Job {
                source: source.clone(),
                target: target.clone(),
                target_tag: format!("{}{}", s.tag, self.suffix),
                tag: s.tag,
                platforms: s.platforms,
            })
            .collect()
    }
}

/// The tags a matrix gives (of `backend`'s rules only, when given), narrowed to `explicit`
/// when that names any: each must be one of them.
fn from_matrix(
    m: &Matrix,
    backend: Option<&str>,
    explicit: &[String],
) -> Result<Vec<Selected>, Error> {
    let file = m.path.display();
    let tags = m.tags(backend);
    if let (Some(b), true) = (backend, tags.is_empty()) {
        return Err(Error::Matrix(format!(
            "matrix {file} has no rule for backend {b} (its rules are for {})",
            m.backends().join(", ")
        )));
    }
    for t in explicit {
        if !tags.iter().any(|m| m.tag == *t) {
            let names: Vec<&str> = tags.iter().map(|m| m.tag.as_str()).collect();
            return Err(Error::Request(format!(
                "--tag {t} is not a tag matrix {file} gives ({})",
                names.join(", ")
            )));
        }
    }
    let chosen: Vec<Selected> = tags
        .into_iter()
        .filter(|t| explicit.is_empty() || explicit.contains(&t.tag))
        .map(|t| Selected {
            tag: t.tag,
            platforms: t.platforms,
        })
        .collect();
    let listed: Vec<String> = chosen
        .iter()
        .map(|s| match &s.platforms {
            Some(p) => format!("{} ({p} only)", s.tag),
            None => s.tag.clone(),
        })
        .collect();
    tracing::info!(
        "matrix {file}: {} tag(s): {}",
        chosen.len(),
        listed.join(", ")
    );
    Ok(chosen)
}

/// Checks that an explicit tag belongs to the backend and is a tag the registry accepts.
fn check_tag(backend: &str, tag: &str) -> Result<(), Error> {
    let ok = tag
        .strip_prefix(backend)
        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()));
    if !ok {
        let p = backend;
        return Err(Error::Request(format!(
            "tag {tag:?} is not a {p} tag (expected {p}<version>-..., e.g. {p}12.9-vllm0.27.1)"
        )));
    }
    crate::tags::check(tag).map_err(|e| Error::Request(e.to_string()))
}

/// Checks the name a tag gets in the target before anything is read or pushed.
fn check_target_tag(tag: &str, suffix: &str) -> Result<(), Error> {
    crate::tags::check(&format!("{tag}{suffix}")).map_err(|e| {
        Error::Request(format!(
            "target of {tag:?} with --tag-suffix {suffix:?}: {e}"
        ))
    })
}

/// Lists the repository and keeps the multi-arch tags of `backend` that some patch is for,
/// sorted.
pub async fn discover(
    reg: &Registry,
    repo: &Repo,
    backend: &str,
    patches: &[Patch],
    include_dev: bool,
) -> Result<Vec<String>, Error> {
    let mut tags: Vec<String> = reg
        .tags_list(repo)
        .await?
        .into_iter()
        .filter(|t| crate::tags::discovers(patches, backend, t, include_dev))
        .collect();
    tags.sort();
    tracing::info!("found {} affected {backend} tag(s) in {repo}", tags.len());
    Ok(tags)
}
