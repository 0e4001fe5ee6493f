//! Which platforms of a tag a run patches: every one (the default), or those a matrix rule
//! names; a platform left out keeps its manifest, and its digest, in the new index.

/// The platforms of one tag to patch, as `os/arch[/variant]`, sorted and each once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platforms(Vec<String>);

impl Platforms {
    pub fn new(names: impl IntoIterator<Item = String>) -> Self {
        let mut v: Vec<String> = names.into_iter().collect();
        v.sort();
        v.dedup();
        Platforms(v)
    }

    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// The platforms of both (a tag two rules name gets the platforms of each).
    pub fn union(&self, other: &Platforms) -> Platforms {
        Platforms::new(self.0.iter().chain(&other.0).cloned())
    }

    /// Whether `platform` (`linux/arm64/v8`) is one of these: the same os and architecture,
    /// and the same variant where a name gives one, so `linux/arm64` takes `linux/arm64/v8` as
    /// `docker --platform linux/arm64` does, and `linux/arm/v7` does not take `linux/arm/v6`.
    pub fn allows(&self, platform: &str) -> bool {
        let mut have = platform.split('/');
        let (os, arch, variant) = (have.next(), have.next(), have.next());
        self.0.iter().any(|name| {
            let mut want = name.split('/');
            want.next() == os
                && want.next() == arch
                && want.next().is_none_or(|v| Some(v) == variant)
        })
    }
}

impl std::fmt::Display for Platforms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}
