use super::*;
use crate::patch::outcome::Outcome;

fn rec(outcome: Outcome, original: &str, patched: Option<&str>) -> ImageRecord {
    ImageRecord {
        source: "r/x:t".into(),
        target: "r/x:t".into(),
        outcome,
        original_digest: original.into(),
        patched_digest: patched.map(Into::into),
        media_type: String::new(),
        reason: String::new(),
        dropped_attestations: Vec::new(),
        bytes_to_push: 0,
        platforms: Vec::new(),
        companions: vec![CompanionRecord {
            platform: "linux/amd64".into(),
            source: "r/x:t-linux-amd64".into(),
            target: "r/x:t-linux-amd64".into(),
            original_digest: "c-orig".into(),
            patched_digest: patched.map(|_| "c-new".into()),
            moved: false,
        }],
        signatures: Vec::new(),
        in_progress: false,
    }
}

#[test]
fn a_rerun_never_replaces_an_original() {
    // Killed between the tag and its companion: then a re-run finds it already patched.
    let mut first = rec(Outcome::Patched, "orig", Some("new"));
    first.in_progress = true;
    let mut images = vec![first];
    let mut again = rec(Outcome::AlreadyPatched, "new", Some("new"));
    again.companions[0].original_digest = "c-orig".into();
    again.companions[0].moved = true;
    merge(&mut images, again);
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].original_digest, "orig");
    assert_eq!(images[0].outcome, Outcome::Patched);
    assert!(!images[0].in_progress);
    assert!(images[0].companions[0].moved);
    assert_eq!(images[0].companions[0].original_digest, "c-orig");
    // And a third run changes nothing of it.
    merge(
        &mut images,
        rec(Outcome::AlreadyPatched, "new", Some("new")),
    );
    assert_eq!(images[0].original_digest, "orig");
    assert!(images[0].companions[0].moved);
}

#[test]
fn the_same_work_further_along_replaces_and_a_moved_tag_is_kept_apart() {
    let mut first = rec(Outcome::Patched, "orig", Some("new"));
    first.in_progress = true;
    let mut images = vec![first];
    merge(&mut images, rec(Outcome::Patched, "orig", Some("new")));
    assert_eq!(images.len(), 1);
    assert!(!images[0].in_progress);
    // Someone pushed another image to the tag; the earlier record stays for rollback.
    merge(&mut images, rec(Outcome::Patched, "other", Some("new2")));
    assert_eq!(images.len(), 2);
    assert_eq!(images[0].original_digest, "orig");
    assert_eq!(images[1].original_digest, "other");
}

#[test]
fn recorder_refuses_bad_paths_before_any_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = Recorder::open(dir.path(), "p")
        .err()
        .expect("a directory")
        .to_string();
    assert!(e.contains("is a directory"), "{e}");
    let e = Recorder::open(&dir.path().join("no/such/map.json"), "p")
        .err()
        .expect("missing folder")
        .to_string();
    assert!(e.contains("does not exist"), "{e}");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, b"not json").expect("write");
    let e = Recorder::open(&bad, "p")
        .err()
        .expect("unreadable map")
        .to_string();
    assert!(e.contains("not valid"), "{e}");
    let path = dir.path().join("map.json");
    let r = Recorder::open(&path, "p").expect("open");
    assert!(!path.exists(), "opening writes nothing");
    r.record(rec(Outcome::Patched, "orig", Some("new")))
        .expect("record");
    let back = DigestMap::read(&path).expect("read");
    assert_eq!(back.images.len(), 1);
    let e = Recorder::open(&path, "p")
        .err()
        .expect("a second run on the same map")
        .to_string();
    assert!(e.contains("another runner-patch run"), "{e}");
    drop(r);
    let e = Recorder::open(&path, "other")
        .err()
        .expect("other patch")
        .to_string();
    assert!(e.contains("records patch"), "{e}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn shard_maps_join_into_one_and_a_tag_in_two_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at = |name: &str| dir.path().join(name);
    let with_target = |target: &str, original: &str| {
        let mut r = rec(Outcome::Patched, original, Some("new"));
        r.target = target.into();
        r.source = target.into();
        r
    };
    let write = |name: &str, patch: &str, recs: Vec<ImageRecord>| {
        DigestMap::new(patch, recs).write(&at(name)).expect("write");
        at(name)
    };
    let a = write(
        "a.json",
        "p",
        vec![with_target("r/x:1", "o1"), with_target("r/x:3", "o3")],
    );
    let b = write("b.json", "p", vec![with_target("r/x:2", "o2")]);
    let joined = join(&at("all.json"), &[a.clone(), b.clone()]).expect("join");
    let targets: Vec<&str> = joined
        .map
        .images
        .iter()
        .map(|r| r.target.as_str())
        .collect();
    assert_eq!(
        targets,
        ["r/x:1", "r/x:3", "r/x:2"],
        "inputs in order, records in theirs"
    );
    assert_eq!(joined.from, vec![(a.clone(), 2), (b.clone(), 1)]);
    let back = DigestMap::read(&at("all.json")).expect("read");
    assert_eq!(back.images.len(), 3);
    // Joining again changes nothing; a map already there is merged into, never replaced.
    join(&at("all.json"), &[a.clone(), b.clone()]).expect("again");
    assert_eq!(
        DigestMap::read(&at("all.json")).expect("read").images.len(),
        3
    );

    // A tag in two maps, maps of two patches, and no map at all: refused, nothing written.
    let twice = write("c.json", "p", vec![with_target("r/x:2", "o2")]);
    let e = join(&at("bad.json"), &[a.clone(), b.clone(), twice]).expect_err("a tag in two shards");
    assert!(matches!(e, Error::Conflict(_)), "{e}");
    assert!(
        e.to_string().contains("r/x:2") && e.to_string().contains("c.json"),
        "{e}"
    );
    let other = write("d.json", "q", vec![with_target("r/x:9", "o9")]);
    let e = join(&at("bad.json"), &[a, other]).expect_err("two patches");
    assert!(matches!(e, Error::OtherPatch(_)), "{e}");
    assert!(matches!(join(&at("bad.json"), &[]), Err(Error::Invalid(_))));
    assert!(!at("bad.json").exists());
}
