use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use super::*;

fn hex_of(bytes: &[u8]) -> String {
    crate::digest::sha256(bytes)
        .trim_start_matches("sha256:")
        .to_owned()
}

fn run(inputs: &[Input]) -> Result<(), Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(fetch_all(inputs))
}

/// Serves `/old` as a redirect to `/new`, `/new` with `body`, anything else 404, for `n`
/// requests; returns the base URL.
fn serve(body: &'static [u8], n: usize) -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", l.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for s in l.incoming().take(n) {
            let mut s = s.expect("conn");
            let mut line = String::new();
            let mut r = BufReader::new(s.try_clone().expect("clone"));
            r.read_line(&mut line).expect("request");
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).expect("header") <= 2 {
                    break;
                }
            }
            let answer = if line.starts_with("GET /old ") {
                b"HTTP/1.1 302 Found\r\nLocation: /new\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
            } else if line.starts_with("GET /new ") {
                let mut a = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                a.extend_from_slice(body);
                a
            } else {
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
            };
            s.write_all(&answer).expect("answer");
        }
    });
    base
}

#[test]
fn http_follows_redirects_and_keeps_the_right_bytes_only() {
    let dir = tempfile::tempdir().expect("tmp");
    let base = serve(b"wheel bytes", 3);
    let dest = dir.path().join("sub/a-1.0-py3-none-any.whl");
    let good = Input {
        url: format!("{base}/old"),
        sha256: hex_of(b"wheel bytes"),
        dest: dest.clone(),
    };
    run(std::slice::from_ref(&good)).expect("fetched");
    assert_eq!(std::fs::read(&dest).expect("kept"), b"wheel bytes");
    // A 404 is one line naming the URL and the answer.
    let missing = Input {
        url: format!("{base}/gone"),
        dest: dir.path().join("gone.whl"),
        ..good.clone()
    };
    let e = run(&[missing]).expect_err("404").to_string();
    assert!(e.contains("/gone") && e.contains("404"), "{e}");
    assert!(!dir.path().join("gone.whl").exists());
    // The destination now holds the right bytes: not fetched again (the server is gone).
    run(&[good]).expect("already there");
}

#[test]
fn a_hash_mismatch_names_both_hashes_and_keeps_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path().join("src.whl");
    std::fs::write(&src, b"other bytes").expect("write");
    let dest = dir.path().join("dest.whl");
    let url = format!("file://{}", src.display());
    let expected = hex_of(b"wheel bytes");
    let e = run(&[Input {
        url: url.clone(),
        sha256: expected.clone(),
        dest: dest.clone(),
    }])
    .expect_err("mismatch")
    .to_string();
    assert!(e.starts_with(&url), "{e}");
    assert!(
        e.contains(&expected) && e.contains(&hex_of(b"other bytes")),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["src.whl"]);
    // A wrong file already at the destination is replaced by the right bytes.
    std::fs::write(&dest, b"stale").expect("stale");
    run(&[Input {
        url,
        sha256: hex_of(b"other bytes"),
        dest: dest.clone(),
    }])
    .expect("fetched");
    assert_eq!(std::fs::read(&dest).expect("kept"), b"other bytes");
}

#[test]
fn other_schemes_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tmp");
    let e = run(&[Input {
        url: "ftp://example.invalid/a.whl".into(),
        sha256: hex_of(b""),
        dest: dir.path().join("a.whl"),
    }])
    .expect_err("ftp")
    .to_string();
    assert!(e.contains("\"ftp\""), "{e}");
}
