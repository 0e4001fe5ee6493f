//! Files a patch fetches from outside before any image is read (`PatchKind::inputs`: a lock's
//! wheels by URL): each fetched over http(s) or copied from a `file://` URL, streamed to a
//! temporary file beside its destination while hashed, and renamed into place only when its
//! sha256 is the one named; a destination that already holds those bytes is not fetched again.
//! A failure stops the run before any registry is touched.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use sha2::Digest;

use crate::patch::Input;

/// Time to open a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the next bytes of an answer (a whole wheel may take minutes).
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Redirects followed (PyPI's files host answers directly; mirrors redirect once or twice).
const MAX_REDIRECTS: usize = 10;

/// Why an input could not be had; the one line names the URL.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

/// Fetches what the patches take from outside (their `inputs`), before any image is read.
pub async fn fetch_for(patches: &[crate::patch::Patch]) -> Result<(), Error> {
    let inputs: Vec<Input> = patches.iter().flat_map(|p| p.kind().inputs()).collect();
    fetch_all(&inputs).await
}

/// Fetches every input not already in place (each destination once), in order.
pub async fn fetch_all(inputs: &[Input]) -> Result<(), Error> {
    let client = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS))
        .user_agent(concat!("runner-patch/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| Error(format!("cannot start an HTTP client: {e}")))?;
    let mut done: Vec<&Path> = Vec::new();
    for input in inputs {
        if done.contains(&input.dest.as_path()) {
            continue;
        }
        fetch(&client, input).await?;
        done.push(&input.dest);
    }
    Ok(())
}

/// A temporary file beside the destination, hashing what is written to it.
struct Partial {
    path: std::path::PathBuf,
    file: std::fs::File,
    hasher: sha2::Sha256,
}

impl Partial {
    fn create(dest: &Path) -> std::io::Result<Self> {
        if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let path = crate::fsutil::tmp_path(dest);
        let file = std::fs::File::create(&path)?;
        Ok(Partial {
            path,
            file,
            hasher: sha2::Sha256::new(),
        })
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.hasher.update(bytes);
        self.file.write_all(bytes)
    }

    /// Keeps the file at `dest` when its hash is `expected`; removes it otherwise.
    fn finish(mut self, input: &Input) -> Result<(), Error> {
        let got = hex::encode(std::mem::take(&mut self.hasher).finalize());
        if got != input.sha256.to_ascii_lowercase() {
            let _ = std::fs::remove_file(&self.path);
            return Err(Error(format!(
                "{}: the file's sha256 is {got}, but the lock names {}; it is not kept",
                input.url, input.sha256
            )));
        }
        let kept = (|| {
            self.file.flush()?;
            self.file.sync_all()?;
            std::fs::rename(&self.path, &input.dest)?;
            std::fs::File::open(crate::fsutil::parent_dir(&input.dest))?.sync_all()
        })();
        kept.map_err(|e| {
            let _ = std::fs::remove_file(&self.path);
            Error(format!(
                "{}: cannot write {}: {e}",
                input.url,
                input.dest.display()
            ))
        })
    }
}

async fn fetch(client: &reqwest::Client, input: &Input) -> Result<(), Error> {
    if crate::digest::file_hex(&input.dest).is_ok_and(|h| h == input.sha256.to_ascii_lowercase()) {
        tracing::debug!("{} already at {}", input.url, input.dest.display());
        return Ok(());
    }
    let url = reqwest::Url::parse(&input.url)
        .map_err(|e| Error(format!("{}: not a URL: {e}", input.url)))?;
    let io = |e: std::io::Error| {
        Error(format!(
            "{}: cannot write {}: {e}",
            input.url,
            input.dest.display()
        ))
    };
    let mut part = Partial::create(&input.dest).map_err(io)?;
    let copied = match url.scheme() {
        "http" | "https" => download(client, url, &mut part).await,
        "file" => copy_file(&url, &mut part),
        other => Err(format!(
            "the scheme {other:?} is not fetched (http, https or file)"
        )),
    };
    if let Err(why) = copied {
        let _ = std::fs::remove_file(&part.path);
        return Err(Error(format!("{}: {why}", input.url)));
    }
    tracing::info!("fetched {} to {}", input.url, input.dest.display());
    part.finish(input)
}

async fn download(
    client: &reqwest::Client,
    url: reqwest::Url,
    part: &mut Partial,
) -> Result<(), String> {
    let mut resp = client.get(url).send().await.map_err(|e| format!("{e}"))?;
    if !resp.status().is_success() {
        return Err(format!("the server answered {}", resp.status()));
    }
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("{e}"))? {
        part.write(&chunk)
            .map_err(|e| format!("cannot write: {e}"))?;
    }
    Ok(())
}

fn copy_file(url: &reqwest::Url, part: &mut Partial) -> Result<(), String> {
    let path = url
        .to_file_path()
        .map_err(|()| "not a local file path".to_owned())?;
    let mut f =
        std::fs::File::open(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if n == 0 {
            return Ok(());
        }
        part.write(&buf[..n])
            .map_err(|e| format!("cannot write: {e}"))?;
    }
}

#[cfg(test)]
mod tests;
