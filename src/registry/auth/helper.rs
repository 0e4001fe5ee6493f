//! Docker credential helpers (`docker-credential-<name> get`), run as Docker runs them and
//! stopped when they do not answer in time.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::registry::error::{Cause, ErrorKind};

/// A credential source that cannot be read: one sentence, no secret.
pub(super) fn unreadable(detail: String) -> Cause {
    Cause::new(ErrorKind::Credentials, detail)
}

/// Runs `docker-credential-<helper> get` as Docker does (the server URL on stdin), killing it
/// when it does not answer within `limit` (a helper waiting on a locked keychain or a prompt
/// would otherwise hang the run). `Some((username, secret))`, or `None` when the helper holds
/// nothing for `key`.
pub(super) fn from_helper(
    program: &str,
    key: &str,
    limit: Duration,
) -> Result<Option<(String, String)>, Cause> {
    let Some(stdout) = run(program, key, limit)? else {
        // Helpers answer "credentials not found in native keychain" with a failure status.
        return Ok(None);
    };
    let v: Value = serde_json::from_slice(&stdout).map_err(|_| {
        unreadable(format!(
            "credential helper {program} printed something that is not JSON"
        ))
    })?;
    let field = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (username, secret) = (field("Username"), field("Secret"));
    if username == "<token>" {
        return Err(unreadable(format!("credential helper {program} holds an identity token for {key}; OAuth identity tokens are not supported, log in with a password or access token")));
    }
    if secret.is_empty() {
        return Ok(None);
    }
    Ok(Some((username, secret)))
}

/// Runs `program get` with `key` on stdin; its stdout when it succeeded, `None` when it
/// exited with a failure status.
fn run(program: &str, key: &str, limit: Duration) -> Result<Option<Vec<u8>>, Cause> {
    let mut child = std::process::Command::new(program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| unreadable(format!("credential helper {program} cannot run ({e})")))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(key.as_bytes());
    }
    // Read its answer on a thread, so a helper that never closes stdout cannot block us.
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(mut stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = stdout.by_ref().take(1024 * 1024).read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    }
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(unreadable(format!(
                    "credential helper {program} did not answer within {} s and was stopped (--helper-timeout sets the limit)",
                    limit.as_secs()
                )));
            }
            Err(e) => {
                return Err(unreadable(format!(
                    "credential helper {program} cannot be waited for ({e})"
                )))
            }
        }
    };
    if !status.success() {
        return Ok(None);
    }
    let wait = limit
        .saturating_sub(started.elapsed())
        .max(Duration::from_millis(100));
    rx.recv_timeout(wait).map(Some).map_err(|_| {
        unreadable(format!(
            "credential helper {program} exited but left its output open"
        ))
    })
}
