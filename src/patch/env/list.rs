//! List variables (`PATH`, `LD_LIBRARY_PATH`): entries prepended or appended, each only when the
//! variable does not hold it already, so a second run adds nothing. Entries are compared as
//! written (`/opt/x/lib` and `/opt/x/lib/` are two entries).

use std::collections::BTreeMap;

/// The entries a patch adds to one list variable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lists {
    pub prepend: Vec<String>,
    pub append: Vec<String>,
}

/// The lists of a patch by variable name, from its `prepend` and `append` tables; `Err` names
/// an empty entry.
pub fn lists(
    prepend: &BTreeMap<String, String>,
    append: &BTreeMap<String, String>,
    sep: &str,
) -> Result<BTreeMap<String, Lists>, String> {
    let mut out: BTreeMap<String, Lists> = BTreeMap::new();
    let split = |name: &str, value: &str| -> Result<Vec<String>, String> {
        let entries: Vec<String> = value.split(sep).map(str::to_owned).collect();
        if entries.iter().any(String::is_empty) {
            return Err(format!(
                "{name} = {value:?} holds an empty entry (separator {sep:?})"
            ));
        }
        Ok(entries)
    };
    for (name, value) in prepend {
        out.entry(name.clone()).or_default().prepend = split(name, value)?;
    }
    for (name, value) in append {
        out.entry(name.clone()).or_default().append = split(name, value)?;
    }
    Ok(out)
}

/// The variable's value with the entries it lacks added (prepended ones first, in their order,
/// before the current value; appended ones after it), and a note saying what was added; `None`
/// when every entry is there already. An unset variable becomes just the entries (`ENV
/// PATH=/x:${PATH}` would leave an empty entry, the current directory, at the end).
pub fn extend(current: Option<&str>, lists: &Lists, sep: &str) -> Option<(String, String)> {
    let have: Vec<&str> = match current {
        Some(v) if !v.is_empty() => v.split(sep).collect(),
        _ => Vec::new(),
    };
    let mut front: Vec<&str> = Vec::new();
    for e in &lists.prepend {
        if !have.contains(&e.as_str()) && !front.contains(&e.as_str()) {
            front.push(e);
        }
    }
    let mut back: Vec<&str> = Vec::new();
    for e in &lists.append {
        let e = e.as_str();
        if !have.contains(&e) && !front.contains(&e) && !back.contains(&e) {
            back.push(e);
        }
    }
    if front.is_empty() && back.is_empty() {
        return None;
    }
    let mut notes = Vec::new();
    if !front.is_empty() {
        notes.push(format!("{} prepended", front.join(sep)));
    }
    if !back.is_empty() {
        notes.push(format!("{} appended", back.join(sep)));
    }
    let all: Vec<&str> = front.into_iter().chain(have).chain(back).collect();
    Some((all.join(sep), notes.join(", ")))
}

/// How a patch's list edit reads in the image history, as the `ENV` line it stands for
/// (`PATH=/x:${PATH}`).
pub fn as_env_line(name: &str, lists: &Lists, sep: &str) -> String {
    let mut parts: Vec<String> = lists.prepend.clone();
    parts.push(format!("${{{name}}}"));
    parts.extend(lists.append.iter().cloned());
    format!("{name}={}", parts.join(sep))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(prepend: &[&str], append: &[&str]) -> Lists {
        Lists {
            prepend: prepend.iter().map(|s| s.to_string()).collect(),
            append: append.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn entries_are_added_once() {
        let path = "/usr/local/sbin:/usr/local/bin:/usr/bin";
        let add = l(&["/usr/local/bishengir/bin"], &[]);
        let (v, note) = extend(Some(path), &add, ":").expect("added");
        assert_eq!(v, format!("/usr/local/bishengir/bin:{path}"));
        assert_eq!(note, "/usr/local/bishengir/bin prepended");
        assert_eq!(
            extend(Some(&v), &add, ":"),
            None,
            "a second run adds nothing"
        );
        // Only the missing ones, in their order; appended after, never twice.
        let (v, note) = extend(
            Some("/a:/b"),
            &l(&["/x", "/b", "/y"], &["/a", "/z", "/x"]),
            ":",
        )
        .expect("added");
        assert_eq!(v, "/x:/y:/a:/b:/z");
        assert_eq!(note, "/x:/y prepended, /z appended");
        // Unset or empty: just the entries.
        assert_eq!(
            extend(None, &l(&["/x"], &["/y"]), ":").expect("set").0,
            "/x:/y"
        );
        assert_eq!(
            extend(Some(""), &l(&[], &["/y"]), ":").expect("set").0,
            "/y"
        );
        assert_eq!(
            as_env_line("PATH", &l(&["/x"], &["/y"]), ":"),
            "PATH=/x:${PATH}:/y"
        );
    }

    #[test]
    fn empty_entries_are_refused() {
        let m = |k: &str, v: &str| [(k.to_owned(), v.to_owned())].into_iter().collect();
        let e = lists(&m("PATH", "/x::/y"), &BTreeMap::new(), ":").expect_err("empty");
        assert_eq!(
            e,
            "PATH = \"/x::/y\" holds an empty entry (separator \":\")"
        );
        let ok = lists(&m("PATH", "/x"), &m("PATH", "/y;/z"), ";").expect("ok");
        assert_eq!(ok["PATH"], l(&["/x"], &["/y", "/z"]));
    }
}
