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

/// The variable's value with the lookup order the operation asked for: the prepended entries
/// first, in their order, then what the value held without them, then the appended entries,
/// in their order; each entry once (an earlier copy elsewhere is removed, as `ENV
/// PATH=/x:${PATH}` followed by dropping later duplicates would give). With a note saying what
/// was added or moved; `None` when the value already reads so. An unset variable becomes just
/// the entries (`ENV PATH=/x:${PATH}` would leave an empty entry, the current directory, at
/// the end).
pub fn extend(current: Option<&str>, lists: &Lists, sep: &str) -> Option<(String, String)> {
    let have: Vec<&str> = match current {
        Some(v) if !v.is_empty() => v.split(sep).collect(),
        _ => Vec::new(),
    };
    let mut front: Vec<&str> = Vec::new();
    for e in &lists.prepend {
        if !front.contains(&e.as_str()) {
            front.push(e);
        }
    }
    let mut back: Vec<&str> = Vec::new();
    for e in &lists.append {
        let e = e.as_str();
        if !front.contains(&e) && !back.contains(&e) {
            back.push(e);
        }
    }
    let ours = |e: &&str| front.contains(e) || back.contains(e);
    let middle: Vec<&str> = have.iter().copied().filter(|e| !ours(e)).collect();
    let all: Vec<&str> = front
        .iter()
        .chain(middle.iter())
        .chain(back.iter())
        .copied()
        .collect();
    if all == have {
        return None;
    }
    // Held entries moved: those past the run the value already started (or ended) with.
    let lead = front.iter().zip(&have).take_while(|(f, h)| f == h).count();
    let trail = back
        .iter()
        .rev()
        .zip(have.iter().rev())
        .take_while(|(b, h)| b == h)
        .count();
    let mut notes = Vec::new();
    let mut say = |entries: &[&str], settled: &[&str], added: &str, moved: &str| {
        let fresh: Vec<&str> = entries
            .iter()
            .copied()
            .filter(|e| !have.contains(e))
            .collect();
        let shifted: Vec<&str> = entries
            .iter()
            .copied()
            .filter(|e| have.contains(e) && !settled.contains(e))
            .collect();
        if !fresh.is_empty() {
            notes.push(format!("{} {added}", fresh.join(sep)));
        }
        if !shifted.is_empty() {
            notes.push(format!("{} {moved}", shifted.join(sep)));
        }
    };
    say(&front, &front[..lead], "prepended", "moved to the front");
    say(
        &back,
        &back[back.len() - trail..],
        "appended",
        "moved to the end",
    );
    if notes.is_empty() {
        notes.push("duplicate entries removed".to_owned());
    }
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
        // In the order asked, each once: a copy further back moves to the front, one an append
        // names moves to the end; a name both prepended and appended stays in front.
        let (v, note) = extend(
            Some("/a:/b"),
            &l(&["/x", "/b", "/y"], &["/a", "/z", "/x"]),
            ":",
        )
        .expect("added");
        assert_eq!(v, "/x:/b:/y:/a:/z");
        assert_eq!(
            note,
            "/x:/y prepended, /b moved to the front, /z appended, /a moved to the end"
        );
        assert_eq!(
            extend(Some(&v), &l(&["/x", "/b", "/y"], &["/a", "/z", "/x"]), ":"),
            None
        );
        // The CUDA image's case: the entries held in another order, one of them at the end.
        let cuda = "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/usr/local/cuda/nvvm/bin";
        let add = l(
            &[
                "/usr/local/nvidia/bin",
                "/usr/local/cuda/bin",
                "/usr/local/cuda/nvvm/bin",
            ],
            &[],
        );
        let (v, note) = extend(Some(cuda), &add, ":").expect("moved");
        assert_eq!(
            v,
            "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/cuda/nvvm/bin:/usr/bin"
        );
        assert_eq!(note, "/usr/local/cuda/nvvm/bin moved to the front");
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

    /// What `/bin/sh` makes of `NAME=<line>` on `current`, each entry kept once: its first copy
    /// for a prepend (`A:B:${PATH}`), its last for an append (`${PATH}:A:B`), which is the
    /// order each asks for.
    fn sh_reads(current: &str, line: &str, keep_last: bool) -> String {
        let out = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                &format!("P=\"$0\"; P=\"{line}\"; printf %s \"$P\""),
                current,
            ])
            .output()
            .expect("/bin/sh");
        let mut seen: Vec<String> = Vec::new();
        let all: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split(':')
            .map(str::to_owned)
            .collect();
        let ordered: Vec<String> = if keep_last {
            all.into_iter().rev().collect()
        } else {
            all
        };
        for e in ordered {
            if !seen.contains(&e) {
                seen.push(e);
            }
        }
        if keep_last {
            seen.reverse();
        }
        seen.join(":")
    }

    #[test]
    fn the_order_is_what_sh_makes_of_the_env_line() {
        // Held in another order, one at the end (the CUDA image's PATH).
        let cuda = "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/usr/local/cuda/nvvm/bin";
        let front = "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/cuda/nvvm/bin";
        let (v, _) = extend(
            Some(cuda),
            &l(&front.split(':').collect::<Vec<_>>(), &[]),
            ":",
        )
        .expect("moved");
        assert_eq!(v, sh_reads(cuda, &format!("{front}:$P"), false));
        // Appended: one already at the front, one in the middle, one new.
        let held = "/opt/b:/usr/bin:/opt/a:/bin";
        let back = ["/opt/a", "/opt/b", "/opt/c"];
        let (v, note) = extend(Some(held), &l(&[], &back), ":").expect("moved");
        assert_eq!(v, sh_reads(held, "$P:/opt/a:/opt/b:/opt/c", true));
        assert_eq!(v, "/usr/bin:/bin:/opt/a:/opt/b:/opt/c");
        assert_eq!(note, "/opt/c appended, /opt/a:/opt/b moved to the end");
        assert_eq!(extend(Some(&v), &l(&[], &back), ":"), None, "already so");
    }
}
