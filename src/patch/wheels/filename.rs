//! Wheel file names (PEP 427/491): distribution, version, build tag and the compressed tag
//! sets (`py2.py3-none-any`) expanded. A leaf, read by the lock (a wheel must be of its
//! package) and by the tag choice.

/// A tag: (python, abi, platform), lower case.
pub type Tag = (String, String, String);

/// A parsed wheel file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    pub dist: String,
    pub version: String,
    pub build: Option<String>,
    /// Every tag of the compressed tag sets, expanded.
    pub tags: Vec<Tag>,
}

/// Parses `{dist}-{version}(-{build})?-{python}-{abi}-{platform}.whl`.
pub fn parse_name(filename: &str) -> Result<WheelName, String> {
    let bad = |why: &str| format!("{filename:?} is not a wheel file name: {why}");
    let stem = filename
        .strip_suffix(".whl")
        .ok_or_else(|| bad("it does not end in .whl"))?;
    let parts: Vec<&str> = stem.split('-').collect();
    if parts.iter().any(|p| p.is_empty()) || !(5..=6).contains(&parts.len()) {
        return Err(bad("expected name-version[-build]-python-abi-platform"));
    }
    let build = (parts.len() == 6).then(|| parts[2].to_owned());
    if build
        .as_ref()
        .is_some_and(|b| !b.starts_with(|c: char| c.is_ascii_digit()))
    {
        return Err(bad("its build tag does not start with a digit"));
    }
    let n = parts.len();
    let split = |s: &str| -> Vec<String> { s.split('.').map(|t| t.to_ascii_lowercase()).collect() };
    let (pys, abis, plats) = (
        split(parts[n - 3]),
        split(parts[n - 2]),
        split(parts[n - 1]),
    );
    if pys.iter().chain(&abis).chain(&plats).any(|t| t.is_empty()) {
        return Err(bad("one of its tags is empty"));
    }
    let mut tags = Vec::new();
    for py in &pys {
        for abi in &abis {
            for plat in &plats {
                tags.push((py.clone(), abi.clone(), plat.clone()));
            }
        }
    }
    Ok(WheelName {
        dist: parts[0].to_owned(),
        version: parts[1].to_owned(),
        build,
        tags,
    })
}
