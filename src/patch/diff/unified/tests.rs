use super::*;

const TWO: &str = "\
From: someone
Subject: two files

diff --git a/pkg/a.py b/pkg/a.py
index 1111111..2222222 100644
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
@@ -7,3 +7,4 @@
 seven
 eight
 nine
+ten
diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1,2 @@
+created
+file
\\ No newline at end of file
";

const A: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\n";

fn files() -> Vec<FileDiff> {
    parse(TWO.as_bytes()).expect("parses")
}

#[test]
fn parses_git_diff_of_several_files() {
    let f = files();
    assert_eq!(f.len(), 2);
    assert_eq!(f[0].path(), "pkg/a.py");
    assert_eq!(f[0].hunks.len(), 2);
    assert!(f[1].creates());
    assert!(f[1].hunks[0].lines[1].no_eol);
}

#[test]
fn applies_and_reverses() {
    let f = files();
    let (out, placed) = apply(A.as_bytes(), &f[0]).expect("applies");
    assert_eq!(
        String::from_utf8(out.clone()).expect("utf8"),
        "one\nTWO\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n"
    );
    assert!(placed.iter().all(|p| p.offset == 0));
    let (back, _) = apply(&out, &f[0].reversed()).expect("reverses");
    assert_eq!(back, A.as_bytes());
    assert!(apply(&out, &f[0]).is_err(), "applying twice must not match");
    let (created, _) = apply(b"", &f[1]).expect("creates");
    assert_eq!(created, b"created\nfile");
}

#[test]
fn offset_is_found_and_reported() {
    let f = files();
    let shifted = format!("zero\nzero\n{A}");
    let (out, placed) = apply(shifted.as_bytes(), &f[0]).expect("applies");
    assert_eq!(
        placed,
        [Placed { hunk: 1, offset: 2 }, Placed { hunk: 2, offset: 2 }]
    );
    assert!(out.starts_with(b"zero\nzero\none\nTWO\n"));
    assert!(out.ends_with(b"nine\nten\n"));
}

#[test]
fn less_context_on_one_side_anchors_at_that_end() {
    // As GNU patch: a hunk without leading context was made at the top of the file.
    let top = parse(b"--- a/p/x\n+++ b/p/x\n@@ -1,2 +1,2 @@\n-one\n+ONE\n two\n").expect("parses");
    assert!(apply(b"one\ntwo\nthree\n", &top[0]).is_ok());
    assert!(apply(b"zero\none\ntwo\nthree\n", &top[0]).is_err());
    let end =
        parse(b"--- a/p/y\n+++ b/p/y\n@@ -2,2 +2,2 @@\n two\n-three\n+THREE\n").expect("parses");
    assert!(apply(b"one\ntwo\nthree\n", &end[0]).is_ok());
    assert!(apply(b"one\ntwo\nthree\nfour\n", &end[0]).is_err());
}

#[test]
fn context_mismatch_is_refused_without_fuzz() {
    let f = files();
    let changed = A.replace("three", "THREE");
    let m = apply(changed.as_bytes(), &f[0]).expect_err("mismatch");
    assert_eq!(m.hunk, 1);
}

#[test]
fn crlf_file_and_bom_are_kept() {
    let f = files();
    let crlf = format!("\u{FEFF}{}", A.replace('\n', "\r\n"));
    let (out, _) = apply(crlf.as_bytes(), &f[0]).expect("applies");
    let s = String::from_utf8(out).expect("utf8");
    assert!(s.starts_with('\u{FEFF}'));
    assert_eq!(s.matches('\n').count(), s.matches("\r\n").count());
    assert!(s.contains("one\r\nTWO\r\nthree\r\n"));
    assert!(s.ends_with("nine\r\nten\r\n"));
}

#[test]
fn no_newline_at_end_is_respected() {
    let d = "--- a/p/x\n+++ b/p/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n";
    let f = parse(d.as_bytes()).expect("parses");
    let (out, _) = apply(b"a\nb", &f[0]).expect("applies");
    assert_eq!(out, b"a\nc\n");
    assert!(apply(b"a\nb\n", &f[0]).is_err(), "b has a newline there");
    let (back, _) = apply(&out, &f[0].reversed()).expect("reverses");
    assert_eq!(back, b"a\nb");
}

#[test]
fn gnu_headers_with_timestamps_and_deletions() {
    let d = "--- a/p/gone.py\t2026-01-01 00:00:00.000000000 +0000\n+++ /dev/null\t1970-01-01 00:00:00.000000000 +0000\n@@ -1,2 +0,0 @@\n-x\n-y\n";
    let f = parse(d.as_bytes()).expect("parses");
    assert!(f[0].deletes());
    assert_eq!(f[0].path(), "p/gone.py");
    assert_eq!(apply(b"x\ny\n", &f[0]).expect("applies").0, b"");
}

#[test]
fn bad_diffs_name_their_line() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "--- a/p/x\n+++ b/p/x\n@@ -1,2 +1,2 @@\n a\n",
            3,
            "ends early",
        ),
        ("hello\n", 1, "no file diff"),
        (
            "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n",
            1,
            "plain relative",
        ),
        ("--- a/p/x\n+++ b/p/y\n@@ -1 +1 @@\n-a\n+b\n", 1, "renames"),
        (
            "diff --git a/p/x b/p/x\nold mode 100644\nnew mode 100755\n",
            1,
            "without text hunks",
        ),
        (
            "--- a/p/x\n+++ b/p/x\n@@ -1 +x @@\n-a\n+b\n",
            3,
            "malformed hunk header",
        ),
    ];
    for (text, line, needle) in cases {
        let e = parse(text.as_bytes()).expect_err(text);
        assert_eq!(e.line, *line, "{text:?}: {e}");
        assert!(e.message.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn a_header_line_past_the_end_of_the_file_is_searched_back_to_its_start() {
    let diff = b"--- a/c.json\n+++ b/c.json\n@@ -46,3 +46,3 @@\n x\n-y\n+Y\n z\n";
    let fd = &parse(diff).expect("parses")[0];
    let file = b"a\nb\nx\ny\nz\nc\n";
    let (out, placed) = apply(file, fd).expect("found near the start, as GNU patch finds it");
    assert_eq!(out, b"a\nb\nx\nY\nz\nc\n");
    assert_eq!(placed[0].offset, -43);
}
