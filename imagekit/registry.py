"""A small client of one repository's distribution API over plain HTTP (a local test registry):
blobs up (monolithic PUT, from bytes or streamed from a file) and down, manifests up and down.
Every digest is checked: what it uploads against what the registry says it stored, what it
downloads against the digest it asked for. Errors name the request and the registry's answer."""

import contextlib
import http.client
import urllib.parse

from imagekit.digest import HashingReader, sha256
from imagekit.media import ACCEPT

MIB = 1 << 20
# A connection the registry closed while idle shows up as one of these on the next request.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class RegistryError(RuntimeError):
    pass


class Client:
    """One repository (e.g. `gpustack/runner`) of the registry at ADDR (`host:port`), over one
    kept-alive connection."""

    def __init__(self, addr, repository, timeout=300):
        self.addr, self.repo, self.timeout = addr, repository, timeout
        self.conn = self._connect()

    def _connect(self):
        host, port = self.addr.rsplit(":", 1)
        return http.client.HTTPConnection(host, int(port), timeout=self.timeout, blocksize=MIB)

    def close(self):
        self.conn.close()

    def _path(self, path):
        """PATH under this repository's /v2/ prefix, or a registry URL (a Location) as a path on
        this registry; a URL on another host is refused rather than followed."""
        if path.startswith("/"):
            return f"/v2/{self.repo}{path}"
        u = urllib.parse.urlsplit(path)
        if u.netloc and u.netloc != self.addr:
            raise RegistryError(f"the registry at {self.addr} sent the client to another host: {path}")
        return u.path + ("?" + u.query if u.query else "")

    def request(self, method, path, body=None, headers=None, ok=(200,)):
        """Sends one request (PATH below /v2/REPO, or a URL the registry gave) and reads the whole
        answer; returns (status, headers, body), raising when the status is not in OK."""
        target = self._path(path)
        for attempt in (1, 2):
            try:
                self.conn.request(method, target, body=body, headers=headers or {})
                r = self.conn.getresponse()
                data = r.read()
                break
            except _STALE:
                self.conn.close()
                rewind = getattr(body, "seek", None)
                if attempt == 2 or not (body is None or isinstance(body, bytes) or rewind):
                    raise
                if rewind:
                    rewind(0)
        if r.status not in ok:
            raise RegistryError(f"{method} http://{self.addr}{target}: HTTP {r.status}: {data[:500]!r}")
        return r.status, r.headers, data

    # --- blobs ---------------------------------------------------------------------------

    def has_blob(self, digest):
        st, _, _ = self.request("HEAD", f"/blobs/{digest}", ok=(200, 404))
        return st == 200

    def push_blob(self, data=None, *, path=None, digest=None, size=None):
        """Uploads a blob (DATA, or the file PATH streamed, whose DIGEST and SIZE are given) with
        one monolithic PUT, unless the repository has it. True when it was uploaded."""
        if data is not None:
            digest, size = digest or sha256(data), len(data)
            if sha256(data) != digest:
                raise RegistryError(f"blob bytes have digest {sha256(data)}, not {digest}")
        elif path is None or digest is None or size is None:
            raise ValueError("push_blob needs DATA, or PATH with DIGEST and SIZE")
        if self.has_blob(digest):
            return False
        _, h, _ = self.request("POST", "/blobs/uploads/", b"", {"Content-Length": "0"}, ok=(202,))
        loc = h["Location"]
        loc += ("&" if "?" in loc else "?") + "digest=" + urllib.parse.quote(digest, safe="")
        hdrs = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        if path is not None:
            with open(path, "rb") as f:
                _, h, _ = self.request("PUT", loc, f, hdrs, ok=(201,))
        else:
            _, h, _ = self.request("PUT", loc, data, hdrs, ok=(201,))
        got = h.get("Docker-Content-Digest")
        if got and got != digest:
            raise RegistryError(f"the registry stored blob {got}, expected {digest}")
        return True

    def blob(self, digest):
        """The blob's bytes, checked against DIGEST."""
        _, _, body = self.request("GET", f"/blobs/{digest}")
        if sha256(body) != digest:
            raise RegistryError(f"blob {digest} was served as bytes with digest {sha256(body)}")
        return body

    @contextlib.contextmanager
    def open_blob(self, digest):
        """The blob as a stream (on a connection of its own), hashed as it is read: check the
        reader's `digest` and `size` after `drain()`."""
        conn = self._connect()
        try:
            target = self._path(f"/blobs/{digest}")
            conn.request("GET", target)
            r = conn.getresponse()
            if r.status != 200:
                raise RegistryError(f"GET http://{self.addr}{target}: HTTP {r.status}: {r.read(500)!r}")
            yield HashingReader(r)
        finally:
            conn.close()

    # --- manifests -----------------------------------------------------------------------

    def put_manifest(self, ref, data, media_type):
        """Pushes manifest bytes under REF (a tag or their digest); returns their digest."""
        _, h, _ = self.request("PUT", f"/manifests/{ref}", data, {"Content-Type": media_type}, ok=(201,))
        got = h.get("Docker-Content-Digest")
        if got and got != sha256(data):
            raise RegistryError(f"the registry stored manifest {got}, expected {sha256(data)}")
        return sha256(data)

    def manifest(self, ref, missing_ok=False):
        """(Content-Type, bytes) of the manifest REF (checked when REF is a digest); None when it
        is not there and MISSING_OK."""
        st, h, body = self.request("GET", f"/manifests/{ref}", headers={"Accept": ACCEPT},
                                   ok=(200, 404) if missing_ok else (200,))
        if st == 404:
            return None
        if ref.startswith("sha256:") and sha256(body) != ref:
            raise RegistryError(f"manifest {ref} was served as bytes with digest {sha256(body)}")
        return h.get("Content-Type"), body
