"""A PEP 503 simple index of test wheels on 127.0.0.1 (a free port), in a thread, for the
requirements route's proof: uv resolves against it, as it would against PyPI or a private index.

    with Index(wheels, auth=("ci", "s3cret")) as index:
        index.url            # http://127.0.0.1:PORT/simple (no credentials)
        index.auth_url       # http://ci:s3cret@127.0.0.1:PORT/simple
        index.modes["page"] = "503"    # or "stall"; kinds: "page", "metadata", "file"
        index.log            # [Request(kind, path, authorized, status)], in order

Pages: `/simple/` lists the projects, `/simple/<normalized name>/` links each wheel as
`/files/<file>#sha256=<hex>` with `data-requires-python` and the PEP 658 / PEP 714 attributes
(`data-dist-info-metadata`, `data-core-metadata`: the sha256 of the wheel's METADATA), served at
`/files/<file>.metadata`; a name that is not normalized is redirected to its normalized page, as
PyPI does. With `auth`, every request without those Basic credentials is answered 401 with a
`WWW-Authenticate` challenge. A kind set to "503" answers 503; set to "stall", the server reads
the request and answers nothing until the index is closed (a client must time out).
"""
from __future__ import annotations

import base64
import hashlib
import html
import http.server
import re
import tarfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

KINDS = ("page", "metadata", "file")
MODES = ("ok", "503", "stall")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Request:
    kind: str
    path: str
    authorized: bool
    status: int


@dataclass(frozen=True)
class Served:
    """One wheel as the index serves it."""
    filename: str
    project: str
    data: bytes
    metadata: bytes
    requires_python: str | None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def metadata_sha256(self) -> str:
        return hashlib.sha256(self.metadata).hexdigest()


def served(path: Path) -> Served:
    """The wheel (or sdist, `.tar.gz`) at PATH, its METADATA (PKG-INFO) read from the archive;
    an sdist's page link has no PEP 658 attributes."""
    data = Path(path).read_bytes()
    if str(path).endswith(".tar.gz"):
        with tarfile.open(path) as tf:
            (info,) = [m for m in tf.getmembers() if re.fullmatch(r"[^/]+/PKG-INFO", m.name)]
            metadata = tf.extractfile(info).read()
    else:
        with zipfile.ZipFile(path) as zf:
            (meta_name,) = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
            metadata = zf.read(meta_name)
    fields = {}
    for line in metadata.decode().split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(": ")
        fields.setdefault(key, value)
    return Served(Path(path).name, normalize(fields["Name"]), data, metadata, fields.get("Requires-Python"))


class Index:
    """The index of the wheels at PATHS (see the module's doc)."""

    def __init__(self, paths, auth: tuple[str, str] | None = None):
        self.wheels: dict[str, Served] = {}
        for p in paths:
            self.add(p)
        self.auth = auth
        self.modes = {k: "ok" for k in KINDS}
        self.log: list[Request] = []
        self.closing = threading.Event()
        self.lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"index": self})
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def add(self, path) -> Served:
        s = served(path)
        self.wheels[s.filename] = s
        return s

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def url(self) -> str:
        return self.base + "/simple"

    @property
    def auth_url(self) -> str:
        assert self.auth, "the index has no credentials"
        user, token = self.auth
        return f"http://{user}:{token}@127.0.0.1:{self.httpd.server_address[1]}/simple"

    def requests(self, kind: str | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.log if kind is None or r.kind == kind]

    def __enter__(self) -> "Index":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- what the handler asks ------------------------------------------------------------

    def authorized(self, header: str | None) -> bool:
        if not self.auth:
            return True
        want = "Basic " + base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
        return header == want

    def project_page(self, project: str) -> bytes | None:
        links = []
        for s in sorted(self.wheels.values(), key=lambda s: s.filename):
            if s.project != project:
                continue
            attrs = f'href="/files/{s.filename}#sha256={s.sha256}"'
            if s.requires_python:
                attrs += f' data-requires-python="{html.escape(s.requires_python)}"'
            if s.filename.endswith(".whl"):
                attrs += f' data-dist-info-metadata="sha256={s.metadata_sha256}"'
                attrs += f' data-core-metadata="sha256={s.metadata_sha256}"'
            links.append(f"    <a {attrs}>{s.filename}</a><br/>")
        if not links:
            return None
        return _page(f"Links for {project}", links)

    def root_page(self) -> bytes:
        names = sorted({s.project for s in self.wheels.values()})
        return _page("Simple index", [f'    <a href="/simple/{n}/">{n}</a><br/>' for n in names])


def _page(title: str, lines: list[str]) -> bytes:
    body = "\n".join(lines)
    return (f"<!DOCTYPE html>\n<html>\n  <head><meta name=\"pypi:repository-version\" content=\"1.0\">"
            f"<title>{title}</title></head>\n  <body>\n{body}\n  </body>\n</html>\n").encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    index: Index
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # the index keeps its own log
        pass

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head: bool = False):
        ix = self.index
        path = self.path.split("?", 1)[0]
        kind = "page" if path.startswith("/simple") else "metadata" if path.endswith(".metadata") else "file"
        authorized = ix.authorized(self.headers.get("Authorization"))
        status, body, ctype, location = self._answer(path, kind, authorized)
        with ix.lock:
            ix.log.append(Request(kind, path, authorized, status))
        if status == 0:  # stall: answer nothing until the index closes
            ix.closing.wait()
            self.close_connection = True
            return
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="runner-patch test index"')
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _answer(self, path: str, kind: str, authorized: bool):
        ix = self.index
        if not authorized:
            return 401, b"credentials required\n", "text/plain", None
        mode = ix.modes[kind]
        if mode == "503":
            return 503, b"index unavailable\n", "text/plain", None
        if mode == "stall":
            return 0, b"", "", None
        if path in ("/simple", "/simple/"):
            return 200, ix.root_page(), "text/html", None
        if kind == "page":
            name = path[len("/simple/"):].strip("/")
            if "/" in name:
                return 404, b"not found\n", "text/plain", None
            if name != normalize(name) or not path.endswith("/"):
                return 301, b"", "text/plain", f"/simple/{normalize(name)}/"
            page = ix.project_page(name)
            return (200, page, "text/html", None) if page else (404, b"not found\n", "text/plain", None)
        name = path[len("/files/"):]
        if kind == "metadata":
            s = ix.wheels.get(name[: -len(".metadata")])
            s = s if s and s.filename.endswith(".whl") else None
            return (200, s.metadata, "application/octet-stream", None) if s else (404, b"", "text/plain", None)
        s = ix.wheels.get(name)
        return (200, s.data, "application/octet-stream", None) if s else (404, b"not found\n", "text/plain", None)
