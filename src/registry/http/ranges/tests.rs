//! Range reads against a small HTTP server in the test: every answer a registry or CDN could
//! give a range request, checked to end with the blob's exact bytes (or one clear error)
//! within the bounds, never a hang. The real registry and the fault proxy are in
//! `tests/it/ranges.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::part::judge;
use crate::media::Descriptor;
use crate::registry::error::ErrorKind;
use crate::registry::repo::Repo;
use crate::registry::settings::{Limits, Ranges, Retry, Settings};
use crate::registry::transport::Transport;

const RANGE: u64 = 16 * 1024;

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    listener: &'static str,
    path: String,
    range: Option<(u64, u64)>,
    authorization: bool,
}

/// How the server answers the `n`th blob request (1-based) on a listener.
#[derive(Debug, Clone)]
enum Reply {
    /// The range asked for (or the whole blob without one), honestly.
    Honest,
    /// 200 with the whole blob, whatever was asked.
    Whole,
    /// The right bytes under this `Content-Range`.
    Labelled(String),
    /// The right headers, one byte of the body flipped.
    Flipped,
    /// The right headers, this many body bytes, then the connection closes.
    Cut(usize),
    /// The right headers, this many body bytes, then silence.
    Stall(usize),
    /// The honest answer, its body sent at about 4 MB/s.
    Slow,
    /// A redirect to this URL.
    Redirect(String),
    Status(u16),
}

type Rule = Arc<dyn Fn(&'static str, usize, &Seen) -> Reply + Send + Sync>;

struct Server {
    addr: String,
    size: usize,
    seen: Arc<Mutex<Vec<Seen>>>,
}

fn blob() -> Vec<u8> {
    blob_of(100_000)
}

fn blob_of(size: usize) -> Vec<u8> {
    (0..size as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// A server whose replies `make` decides, given the address of its second listener (another
/// origin, where redirects may point).
async fn serve_with(make: impl FnOnce(&str) -> Rule) -> Server {
    serve_sized(100_000, make).await
}

/// As [`serve_with`], serving a blob of `size` bytes.
async fn serve_sized(size: usize, make: impl FnOnce(&str) -> Rule) -> Server {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let main = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let other = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = main.local_addr().expect("addr").to_string();
    let elsewhere = other.local_addr().expect("addr").to_string();
    let rule = make(&elsewhere);
    for (name, listener) in [("registry", main), ("elsewhere", other)] {
        let (seen, rule) = (seen.clone(), rule.clone());
        tokio::spawn(async move {
            let mut count = 0;
            while let Ok((sock, _)) = listener.accept().await {
                count += 1;
                tokio::spawn(answer(sock, name, count, seen.clone(), rule.clone(), size));
            }
        });
    }
    Server { addr, size, seen }
}

async fn serve(rule: Rule) -> Server {
    serve_with(|_| rule).await
}

async fn answer(
    mut sock: TcpStream,
    listener: &'static str,
    n: usize,
    seen: Arc<Mutex<Vec<Seen>>>,
    rule: Rule,
    size: usize,
) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match sock.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let path = text.split_whitespace().nth(1).unwrap_or("").to_owned();
    let header = |name: &str| {
        text.lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            })
            .map(|(_, v)| v.trim().to_owned())
    };
    let total = size as u64;
    let range = header("range").and_then(|r| {
        let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
        let b = if b.is_empty() {
            total - 1
        } else {
            b.parse().ok()?
        };
        Some((a.parse().ok()?, b))
    });
    let s = Seen {
        listener,
        path,
        range,
        authorization: header("authorization").is_some(),
    };
    seen.lock().expect("lock").push(s.clone());
    let data = blob_of(size);
    let (a, b) = range.unwrap_or((0, total - 1));
    let body = &data[a as usize..=b as usize];
    let partial = |cr: &str| {
        format!("HTTP/1.1 206 Partial Content\r\nContent-Range: {cr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
    };
    let honest = format!("bytes {a}-{b}/{total}");
    let (head, body): (String, &[u8]) = match rule(listener, n, &s) {
        Reply::Honest if range.is_some() => (partial(&honest), body),
        Reply::Honest | Reply::Whole => (
            format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n"),
            &data,
        ),
        Reply::Labelled(cr) => (partial(&cr), body),
        Reply::Slow => {
            let _ = sock.write_all(partial(&honest).as_bytes()).await;
            for piece in body.chunks(64 * 1024) {
                if sock.write_all(piece).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            let _ = sock.shutdown().await;
            return;
        }
        Reply::Flipped => {
            let mut wrong = body.to_vec();
            wrong[0] ^= 0xff;
            let _ = sock.write_all(partial(&honest).as_bytes()).await;
            let _ = sock.write_all(&wrong).await;
            let _ = sock.shutdown().await;
            return;
        }
        Reply::Cut(k) => (partial(&honest), &body[..k.min(body.len())]),
        Reply::Stall(k) => {
            let _ = sock.write_all(partial(&honest).as_bytes()).await;
            let _ = sock.write_all(&body[..k.min(body.len())]).await;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
        Reply::Redirect(url) => (
            format!("HTTP/1.1 307 Temporary Redirect\r\nLocation: {url}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
            &[],
        ),
        Reply::Status(code) => (
            format!("HTTP/1.1 {code} Nope\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
            &[],
        ),
    };
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(body).await;
    let _ = sock.shutdown().await;
}

fn settings(parallel: usize, range: u64) -> Settings {
    Settings {
        limits: Limits {
            idle: Duration::from_secs(1),
            ..Limits::default()
        },
        retry: Retry {
            base: Duration::from_millis(10),
            ..Retry::default()
        },
        max_requests: 16,
        ranges: Ranges {
            parallel,
            size: range,
        },
    }
}

/// Reads the blob through `server` in ranges; the bytes, or the error's kind and text.
async fn read(server: &Server, parallel: usize) -> Result<Vec<u8>, (ErrorKind, String)> {
    read_in(server, parallel, RANGE).await
}

/// Reads the blob through `server` in ranges of `range` bytes.
async fn read_in(
    server: &Server,
    parallel: usize,
    range: u64,
) -> Result<Vec<u8>, (ErrorKind, String)> {
    let repo = Repo::parse(&format!("{}/a/b", server.addr)).expect("repo");
    let t = Transport::new(&[&repo], settings(parallel, range)).expect("transport");
    let data = blob_of(server.size);
    let desc = Descriptor {
        media_type: crate::media::OCI_LAYER_GZIP.to_owned(),
        digest: crate::digest::sha256(&data),
        size: data.len() as u64,
        urls: Vec::new(),
    };
    assert!(t.ranges().applies_to(desc.size));
    let mut stream = Box::pin(super::chunks(&t, &repo, &desc));
    let mut out = Vec::new();
    let read = async {
        while let Some(c) = stream.next().await {
            out.extend_from_slice(&c.map_err(|e| (e.kind(), e.to_string()))?);
        }
        Ok::<_, (ErrorKind, String)>(())
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the read ended within its bounds")?;
    Ok(out)
}

fn rule(f: impl Fn(&'static str, usize, &Seen) -> Reply + Send + Sync + 'static) -> Rule {
    Arc::new(f)
}

fn ranges_of(server: &Server, listener: &str) -> Vec<Option<(u64, u64)>> {
    let seen = server.seen.lock().expect("lock");
    seen.iter()
        .filter(|s| s.listener == listener)
        .map(|s| s.range)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_registry_is_read_in_ranges_of_the_size_asked() {
    let server = serve(rule(|_, _, _| Reply::Honest)).await;
    assert_eq!(read(&server, 4).await.expect("read"), blob());
    let mut got: Vec<(u64, u64)> = ranges_of(&server, "registry")
        .into_iter()
        .flatten()
        .collect();
    got.sort();
    let want: Vec<(u64, u64)> = (0..100_000u64)
        .step_by(RANGE as usize)
        .map(|a| (a, (a + RANGE).min(100_000) - 1))
        .collect();
    assert_eq!(got, want, "every range once, none overlapping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_ignores_ranges_is_read_in_one_request() {
    let server = serve(rule(|_, _, _| Reply::Whole)).await;
    assert_eq!(read(&server, 4).await.expect("read"), blob());
    assert_eq!(ranges_of(&server, "registry").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_answered_wrongly_or_cut_or_stalled_is_tried_again() {
    let cases: Vec<(&str, Rule)> = vec![
        (
            "whole",
            rule(|_, n, _| if n == 3 { Reply::Whole } else { Reply::Honest }),
        ),
        (
            "label",
            rule(|_, n, _| {
                if n == 3 {
                    Reply::Labelled("bytes 0-16383/100000".into())
                } else {
                    Reply::Honest
                }
            }),
        ),
        (
            "cut",
            rule(|_, n, _| {
                if n == 3 {
                    Reply::Cut(1000)
                } else {
                    Reply::Honest
                }
            }),
        ),
        (
            "stall",
            rule(|_, n, _| {
                if n == 3 {
                    Reply::Stall(1000)
                } else {
                    Reply::Honest
                }
            }),
        ),
        (
            "503",
            rule(|_, n, _| {
                if n == 3 {
                    Reply::Status(503)
                } else {
                    Reply::Honest
                }
            }),
        ),
    ];
    for (name, r) in cases {
        let server = serve(r).await;
        assert_eq!(read(&server, 4).await.expect(name), blob(), "{name}");
        let n = ranges_of(&server, "registry").len();
        assert_eq!(n, 8, "{name}: 7 ranges and one retry, no plain stream");
    }
}

/// The third range of the blob.
const THIRD: Option<(u64, u64)> = Some((2 * RANGE, 3 * RANGE - 1));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_that_fails_twice_turns_the_rest_into_one_stream() {
    // The third range is answered with the wrong range every time: after its retry, the rest
    // of the layer is one plain GET from where the bytes in order stopped.
    let server = serve(rule(|_, _, s| {
        if s.range == THIRD {
            Reply::Labelled("bytes 1-2/100000".into())
        } else {
            Reply::Honest
        }
    }))
    .await;
    assert_eq!(read(&server, 2).await.expect("read"), blob());
    let seen = ranges_of(&server, "registry");
    assert_eq!(seen.iter().filter(|r| **r == THIRD).count(), 2, "{seen:?}");
    assert!(
        seen.contains(&Some((2 * RANGE, 99_999))),
        "the plain stream reads on from the third range: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_bytes_under_the_right_headers_are_never_accepted() {
    let server = serve(rule(|_, _, s| {
        if s.range == THIRD {
            Reply::Flipped
        } else {
            Reply::Honest
        }
    }))
    .await;
    let (kind, text) = read(&server, 4).await.expect_err("a flipped byte");
    assert_eq!(kind, ErrorKind::Integrity, "{text}");
    assert!(text.contains("digest mismatch"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_blob_is_the_plain_download_s_error() {
    let server = serve(rule(|_, _, _| Reply::Status(404))).await;
    let (kind, text) = read(&server, 4).await.expect_err("404");
    assert_eq!(kind, ErrorKind::NotFound, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_follow_a_redirect_without_credentials_and_renew_it_when_it_expires() {
    let uses = Arc::new(Mutex::new(std::collections::HashMap::<String, usize>::new()));
    let server = serve_with(|elsewhere| {
        let elsewhere = elsewhere.to_owned();
        rule(move |listener, n, s| {
            if listener == "registry" {
                // Each redirect names a new signature on the other origin.
                return Reply::Redirect(format!("http://{elsewhere}/sig{n}{}", s.path));
            }
            let sig = s.path.split('/').nth(1).unwrap_or("").to_owned();
            let mut uses = uses.lock().expect("lock");
            let k = uses.entry(sig).or_default();
            *k += 1;
            // A signature is good for three requests, then it has expired.
            if *k > 3 {
                Reply::Status(403)
            } else {
                Reply::Honest
            }
        })
    })
    .await;
    assert_eq!(read(&server, 2).await.expect("read"), blob());
    let seen = server.seen.lock().expect("lock").clone();
    let resolved = seen.iter().filter(|s| s.listener == "registry").count();
    let ranged = seen.iter().filter(|s| s.listener == "elsewhere").count();
    // 7 ranges at 3 per signature: the registry was asked again when one expired.
    assert!(resolved >= 3 && ranged >= 7, "{seen:#?}");
    assert!(seen.iter().all(|s| s.range.is_some()), "{seen:#?}");
    assert!(
        seen.iter()
            .all(|s| s.listener == "registry" || !s.authorization),
        "credentials went to the other origin: {seen:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_range_faster_than_the_inflate_leaves_the_rest_to_one_stream() {
    const MIB: u64 = 1024 * 1024;
    // 4 MiB over loopback: far faster than the 200 MiB/s that makes one stream enough.
    let server = serve_sized(12 * MIB as usize, |_| rule(|_, _, _| Reply::Honest)).await;
    assert_eq!(
        read_in(&server, 4, 4 * MIB).await.expect("read"),
        blob_of(12 * MIB as usize)
    );
    let seen = ranges_of(&server, "registry");
    assert_eq!(
        seen,
        [Some((0, 4 * MIB - 1)), Some((4 * MIB, 12 * MIB - 1))],
        "{seen:?}"
    );

    // A first range that comes slowly: the rest is read in parallel ranges.
    let server = serve_sized(3 * MIB as usize, |_| rule(|_, _, _| Reply::Slow)).await;
    assert_eq!(
        read_in(&server, 4, MIB).await.expect("read"),
        blob_of(3 * MIB as usize)
    );
    let mut seen = ranges_of(&server, "registry");
    seen.sort();
    let want: Vec<_> = (0..3).map(|k| Some((k * MIB, (k + 1) * MIB - 1))).collect();
    assert_eq!(seen, want);
}

#[test]
fn a_range_answer_must_be_exactly_what_was_asked() {
    let h = |pairs: &[(&str, &str)]| {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(
                reqwest::header::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        m
    };
    let ok = h(&[
        ("content-range", "bytes 10-19/100"),
        ("content-length", "10"),
    ]);
    assert_eq!(judge(StatusCode::PARTIAL_CONTENT, &ok, 10, 19, 100), Ok(()));
    let star = h(&[("content-range", "bytes 10-19/*")]);
    assert_eq!(
        judge(StatusCode::PARTIAL_CONTENT, &star, 10, 19, 100),
        Ok(())
    );
    let bad = [
        (StatusCode::OK, ok.clone(), "ignored"),
        (StatusCode::NOT_FOUND, ok.clone(), "HTTP 404"),
        (
            StatusCode::PARTIAL_CONTENT,
            h(&[("content-range", "bytes 10-20/100")]),
            "Content-Range",
        ),
        (
            StatusCode::PARTIAL_CONTENT,
            h(&[("content-range", "bytes 10-19/101")]),
            "Content-Range",
        ),
        (StatusCode::PARTIAL_CONTENT, h(&[]), "Content-Range"),
        (
            StatusCode::PARTIAL_CONTENT,
            h(&[
                ("content-range", "bytes 10-19/100"),
                ("content-length", "11"),
            ]),
            "Content-Length",
        ),
        (
            StatusCode::PARTIAL_CONTENT,
            h(&[("content-type", "multipart/byteranges; boundary=x")]),
            "multi-range",
        ),
    ];
    for (status, headers, says) in bad {
        let e = judge(status, &headers, 10, 19, 100).expect_err(says);
        assert!(e.contains(says), "{e}");
    }
}
