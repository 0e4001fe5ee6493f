"""A hostile registry: a reverse proxy in front of a real one that misbehaves on cue.

    python3 -m tests.support.hostile_registry --upstream 127.0.0.1:PORT --case CASE
        [--user U --password P] [--log FILE] [--min-blob BYTES] [--interval S] [--children N]
        [--delay S] [--port N] [--lifetime S]

Two listeners on 127.0.0.1: the registry (`addr`) and "elsewhere" (`elsewhere`), another
origin that stands for a foreign host. Both forward every request to the upstream registry
(so flows can complete) and log it, with the Authorization header it carried, to --log (one
JSON line per request: listener, method, path, authorization). With --user/--password the
registry listener answers 401 with a Basic challenge unless those credentials are sent;
elsewhere never asks for any.

Cases (applied on the registry listener only):
  none              forward as is
  endless-blob      GET of a blob of at least --min-blob bytes: its bytes, then zeros forever
                    (chunked, no length)
  long-blob         the same blob with 1 MiB more than its size, Content-Length announcing it
  long-manifest     GET of a manifest: its bytes, then spaces forever (chunked)
  trickle-manifest  GET of a manifest: the right Content-Length, one byte every --interval s
  stall-blob        GET of a blob of at least --min-blob bytes: half its bytes, then silence
  location-elsewhere  upload Locations (POST/PATCH answers) point at elsewhere
  link-elsewhere    tag lists carry a `Link: <elsewhere/...&last=LAST>; rel="next"`
  children          a tag (not a digest) that is an index is served as an OCI index of
                    --children copies of its first child; child GETs wait --delay s
  foreign-layer     a tag that is an index is served as its first child, whose top layer is
                    replaced by a foreign layer (with `urls`) the registry does not hold

GET /_hostile/stats (no auth) answers {"max_connections", "connections", "requests"} for the
registry listener. Ready-line: {"addr", "elsewhere", "log"}. Daemon contract: see README.md.
"""

import argparse
import base64
import http.client
import http.server
import json
import signal
import socketserver
import sys
import threading
import time

from imagekit import sha256
from tests.support import _common

HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer",
       "transfer-encoding", "upgrade", "expect", "content-length", "host"}
CHUNK = 64 * 1024
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.connections = 0
        self.max_connections = 0
        self.requests = 0

    def opened(self):
        with self.lock:
            self.connections += 1
            self.max_connections = max(self.max_connections, self.connections)

    def closed(self):
        with self.lock:
            self.connections -= 1

    def snapshot(self):
        with self.lock:
            return {"connections": self.connections, "max_connections": self.max_connections,
                    "requests": self.requests}


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 4096


def make_handler(cfg, listener, stats, log_lock, log_fh, log):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            if listener == "registry":
                stats.opened()

        def finish(self):
            try:
                super().finish()
            finally:
                if listener == "registry":
                    stats.closed()

        def log_message(self, fmt, *args):
            log.debug("%s %s", listener, fmt % args)

        # -- plumbing -------------------------------------------------------------------

        def read_body(self):
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def upstream(self, body):
            conn = http.client.HTTPConnection(cfg.upstream, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            headers["Host"] = cfg.upstream
            headers["Connection"] = "close"
            if body or self.command in ("PUT", "POST", "PATCH"):
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body, headers=headers)
            return conn, conn.getresponse()

        def send_head(self, status, headers, length=None, chunked=False):
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in HOP:
                    self.send_header(k, v)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            elif length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()

        def send_whole(self, status, headers, body):
            self.send_head(status, headers, length=len(body))
            if self.command != "HEAD":
                self.wfile.write(body)

        def chunk(self, data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        def record(self):
            _common.write_jsonl(log_lock, log_fh, {
                "listener": listener, "method": self.command, "path": self.path,
                "authorization": self.headers.get("Authorization"), "time": time.time()})

        # -- requests -------------------------------------------------------------------

        def handle_any(self):
            if self.path == "/_hostile/stats":
                self.send_whole(200, [("Content-Type", "application/json")],
                                json.dumps(stats.snapshot()).encode())
                return
            body = self.read_body()
            self.record()
            if listener == "registry":
                with stats.lock:
                    stats.requests += 1
                if cfg.user is not None:
                    want = "Basic " + base64.b64encode(
                        f"{cfg.user}:{cfg.password}".encode()).decode()
                    if self.headers.get("Authorization") != want:
                        self.send_whole(401, [
                            ("WWW-Authenticate", 'Basic realm="hostile"'),
                            ("Content-Type", "application/json")],
                            b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}')
                        return
            case = cfg.case if listener == "registry" else "none"
            is_blob_get = self.command == "GET" and "/blobs/sha256:" in self.path
            is_manifest_get = self.command == "GET" and "/manifests/" in self.path
            by_digest = "/manifests/sha256:" in self.path
            if case == "children" and is_manifest_get and by_digest:
                time.sleep(cfg.delay)
            conn, resp = self.upstream(body)
            try:
                headers = resp.getheaders()
                size = int(resp.getheader("Content-Length") or 0)
                big_blob = is_blob_get and resp.status == 200 and size >= cfg.min_blob
                if case in ("endless-blob", "long-blob", "stall-blob") and big_blob:
                    return getattr(self, case.replace("-", "_"))(resp, headers, size)
                if case in ("long-manifest", "trickle-manifest") and is_manifest_get \
                        and resp.status == 200:
                    return getattr(self, case.replace("-", "_"))(resp, headers)
                if case in ("children", "foreign-layer") and is_manifest_get \
                        and not by_digest and resp.status == 200:
                    data = resp.read()
                    if resp.getheader("Content-Type", "") in INDEX_TYPES:
                        return getattr(self, case.replace("-", "_"))(json.loads(data))
                    return self.send_whole(resp.status, headers, data)
                if case == "location-elsewhere":
                    headers = [(k, self.elsewhere(v) if k.lower() == "location" else v)
                               for k, v in headers]
                if case == "link-elsewhere" and self.command == "GET" \
                        and "/tags/list" in self.path and resp.status == 200:
                    data = resp.read()
                    tags = json.loads(data).get("tags") or []
                    repo = self.path.split("/tags/list")[0]
                    link = f'<http://{cfg.elsewhere}{repo}/tags/list?n=1000&last={tags[-1] if tags else ""}>; rel="next"'
                    return self.send_whole(200, headers + [("Link", link)], data)
                self.forward(resp, headers)
            finally:
                conn.close()

        def forward(self, resp, headers):
            if self.command == "HEAD" or resp.status in (204, 304):
                self.send_head(resp.status, headers,
                               length=int(resp.getheader("Content-Length") or 0))
                return
            if resp.getheader("Content-Length") is None:
                return self.send_whole(resp.status, headers, resp.read())
            self.send_head(resp.status, headers, length=int(resp.getheader("Content-Length")))
            while True:
                data = resp.read(CHUNK)
                if not data:
                    break
                self.wfile.write(data)

        def elsewhere(self, location):
            up = f"http://{cfg.upstream}"
            if location.startswith(up):
                return f"http://{cfg.elsewhere}" + location[len(up):]
            if location.startswith("/"):
                return f"http://{cfg.elsewhere}" + location
            return location

        # -- cases ----------------------------------------------------------------------

        def endless_blob(self, resp, headers, size):
            self.send_head(200, headers, chunked=True)
            self.chunk(resp.read())
            zeros = bytes(CHUNK)
            sent = 0
            while sent < cfg.endless_cap:
                self.chunk(zeros)
                sent += len(zeros)
            log.warning("endless body: the client read %d bytes past the blob", sent)

        def long_blob(self, resp, headers, size):
            extra = 1024 * 1024
            self.send_head(200, headers, length=size + extra)
            self.wfile.write(resp.read())
            self.wfile.write(bytes(extra))

        def stall_blob(self, resp, headers, size):
            data = resp.read()
            self.send_head(200, headers, length=size)
            self.wfile.write(data[: size // 2])
            self.wfile.flush()
            time.sleep(cfg.lifetime)

        def long_manifest(self, resp, headers):
            self.send_head(200, headers, chunked=True)
            self.chunk(resp.read())
            spaces = b" " * CHUNK
            sent = 0
            while sent < cfg.endless_cap:
                self.chunk(spaces)
                sent += len(spaces)

        def trickle_manifest(self, resp, headers):
            data = resp.read()
            self.send_head(200, headers, length=len(data))
            for i in range(len(data)):
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
                time.sleep(cfg.interval)

        def serve_doc(self, doc, media_type):
            raw = json.dumps(doc, separators=(",", ":")).encode()
            digest = sha256(raw)
            self.send_whole(200, [("Content-Type", media_type),
                                  ("Docker-Content-Digest", digest)], raw)

        def children(self, index):
            child = dict(index["manifests"][0])
            entries = []
            for i in range(cfg.children):
                e = dict(child)
                e["platform"] = {"os": "linux", "architecture": "amd64"}
                e["annotations"] = {"org.example.copy": str(i)}
                entries.append(e)
            self.serve_doc({"schemaVersion": 2,
                            "mediaType": "application/vnd.oci.image.index.v1+json",
                            "manifests": entries}, "application/vnd.oci.image.index.v1+json")

        def foreign_layer(self, index):
            child = index["manifests"][0]
            conn = http.client.HTTPConnection(cfg.upstream, timeout=60)
            repo = self.path.split("/manifests/")[0]
            conn.request("GET", f"{repo}/manifests/{child['digest']}",
                         headers={"Accept": child["mediaType"], "Host": cfg.upstream})
            r = conn.getresponse()
            manifest = json.loads(r.read())
            conn.close()
            missing = b"a foreign layer this registry does not hold"
            manifest["layers"][-1] = {
                "mediaType": "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
                "digest": sha256(missing),
                "size": len(missing),
                "urls": ["https://foreign.example/layer.tar.gz"],
            }
            self.serve_doc(manifest, manifest["mediaType"])

        def dispatch(self):
            try:
                self.handle_any()
            except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                self.close_connection = True
            except Exception as e:  # noqa: BLE001 - a test daemon logs and goes on
                log.exception("%s %s %s failed: %s", listener, self.command, self.path, e)
                self.close_connection = True

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = dispatch

    return Handler


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--case", default="none", choices=[
        "none", "endless-blob", "long-blob", "long-manifest", "trickle-manifest", "stall-blob",
        "location-elsewhere", "link-elsewhere", "children", "foreign-layer"])
    ap.add_argument("--user")
    ap.add_argument("--password", default="")
    ap.add_argument("--log")
    ap.add_argument("--min-blob", type=int, default=4096)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--children", type=int, default=2000)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--endless-cap", type=int, default=8 << 30,
                    help="bytes an 'endless' body sends before giving up (a safety net)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--lifetime", type=float, default=1800)
    ap.add_argument("-v", "--verbose", action="store_true")
    cfg = ap.parse_args(argv)
    log = _common.setup_logging("hostile_registry", cfg.verbose)
    _common.die_with_parent()
    log_fh = open(cfg.log, "a", encoding="utf-8") if cfg.log else open("/dev/null", "w")
    log_lock = threading.Lock()
    stats = Stats()
    elsewhere = Server(("127.0.0.1", 0), None)
    cfg.elsewhere = "127.0.0.1:%d" % elsewhere.server_address[1]
    main_srv = Server(("127.0.0.1", cfg.port), None)
    main_srv.RequestHandlerClass = make_handler(cfg, "registry", stats, log_lock, log_fh, log)
    elsewhere.RequestHandlerClass = make_handler(cfg, "elsewhere", stats, log_lock, log_fh, log)
    for srv in (main_srv, elsewhere):
        threading.Thread(target=srv.serve_forever, daemon=True).start()

    done = threading.Event()
    _common.start_watchdog(cfg.lifetime, done.set, log)
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    _common.ready({"addr": "127.0.0.1:%d" % main_srv.server_address[1],
                   "elsewhere": cfg.elsewhere, "log": cfg.log})
    log.info("case %s, upstream %s, elsewhere %s", cfg.case, cfg.upstream, cfg.elsewhere)
    done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
