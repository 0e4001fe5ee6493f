"""Docker token-auth server for a throw-away distribution 2.8.x registry.

    python3 -m tests.support.token_server --dir DIR --service S --issuer I --user U --password P
        [--deny-pull REPO]... [--deny-push REPO]... [--ttl SECONDS]
        [--port N] [--jwt-header x5c|kid] [--lifetime SECONDS]

On first use creates DIR/key.pem (EC P-256) and DIR/rootcert.pem (self-signed,
for the registry's `auth.token.rootcertbundle`); later runs reuse them.
Serves GET /token (query: service, repeated scope=TYPE:NAME:ACTIONS, Basic
auth) and POST /token (OAuth2 form: grant_type=password, username, password,
service, space-separated scope) on 127.0.0.1, answering
{"token", "access_token", "expires_in", "issued_at"}.

Policy: the user with the right password gets every action it asks for
except the denied ones (REPO is an fnmatch pattern; `*` is expanded to
pull,push,delete when something is denied). No credentials: a token with an
empty `access` list (like Docker Hub for a private repository; the registry
then answers 401 insufficient_scope). Wrong credentials: 401. A `service`
other than --service: 400. Every request is logged as one JSON line in
DIR/token.log (user, scopes asked, access granted, status).

The JWT is ES256 signed; its header carries `x5c` (the certificate, base64
DER) by default or, with --jwt-header kid, the libtrust key id of the key.
Ready-line: {"addr", "realm": "http://ADDR/token", "rootcert", "log"}.
"""

import argparse
import base64
import datetime
import fnmatch
import hashlib
import json
import os
import secrets
import signal
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from tests.support import _common

ALL_ACTIONS = ("pull", "push", "delete")


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def load_or_create_key(d, issuer):
    key_path, cert_path = os.path.join(d, "key.pem"), os.path.join(d, "rootcert.pem")
    if os.path.exists(key_path) and os.path.exists(cert_path):
        with open(key_path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), None)
        with open(cert_path, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
        return key, cert, cert_path
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, cert_path


def libtrust_kid(public_key):
    """docker/libtrust key id: base32(sha256(SPKI DER)[:30]) in groups of 4."""
    der = public_key.public_bytes(serialization.Encoding.DER,
                                  serialization.PublicFormat.SubjectPublicKeyInfo)
    s = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode()
    return ":".join(s[i:i + 4] for i in range(0, len(s), 4))


def sign_jwt(key, cert, header_mode, claims):
    header = {"typ": "JWT", "alg": "ES256"}
    if header_mode == "x5c":
        header["x5c"] = [base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()]
    else:
        header["kid"] = libtrust_kid(key.public_key())
    signing_input = (b64url(json.dumps(header, separators=(",", ":")).encode()) + "." +
                     b64url(json.dumps(claims, separators=(",", ":")).encode()))
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return signing_input + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def parse_scope(scope):
    """'repository:a/b:pull,push' -> ('repository', 'a/b', ['pull', 'push'])."""
    head, _, actions = scope.rpartition(":")
    typ, _, name = head.partition(":")
    if not typ or not name:
        return None
    return typ, name, [x for x in actions.split(",") if x]


def grant(args, user, scopes):
    """Merge the scopes asked for and return the access list the user gets."""
    wanted = {}
    for sc in scopes:
        parsed = parse_scope(sc)
        if parsed:
            typ, name, actions = parsed
            acts = wanted.setdefault((typ, name), [])
            acts.extend(a for a in actions if a not in acts)
    if user is None:
        return []
    access = []
    for (typ, name), actions in wanted.items():
        denied = set()
        if typ == "repository":
            if any(fnmatch.fnmatchcase(name, p) for p in args.deny_pull):
                denied.add("pull")
            if any(fnmatch.fnmatchcase(name, p) for p in args.deny_push):
                denied.add("push")
        if "*" in actions and denied:
            actions = [a for a in actions if a != "*"] + [a for a in ALL_ACTIONS if a not in actions]
        granted = [a for a in actions if a not in denied]
        access.append({"type": typ, "name": name, "actions": granted})
    return access


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "runner-patch-token/1"

    def log_message(self, fmt, *a):
        self.server.log.info("%s %s", self.address_string(), fmt % a)

    def reply(self, code, obj, extra=None):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query)
        user = password = None
        auth = self.headers.get("Authorization", "")
        if auth.lower().startswith("basic "):
            try:
                user, _, password = base64.b64decode(auth[6:].strip()).decode().partition(":")
            except ValueError:
                user, password = "", None
        self.issue(url.path, q.get("service", [None])[0], q.get("scope", []), user, password)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(n).decode())
        scopes = " ".join(form.get("scope", [])).split()
        self.issue(urllib.parse.urlsplit(self.path).path, form.get("service", [None])[0],
                   scopes, form.get("username", [None])[0], form.get("password", [None])[0])

    def issue(self, path, service, scopes, user, password):
        srv, args = self.server, self.server.args
        entry = {"time": time.time(), "method": self.command, "service": service,
                 "user": user, "scopes": scopes}
        if path != "/token":
            entry.update(status=404)
            srv.record(entry)
            return self.reply(404, {"errors": [{"code": "NOT_FOUND", "message": path}]})
        if service is not None and service != args.service:
            entry.update(status=400)
            srv.record(entry)
            return self.reply(400, {"errors": [{"code": "INVALID_SERVICE", "message": service}]})
        if user is not None and (user != args.user or password != args.password):
            entry.update(status=401)
            srv.record(entry)
            return self.reply(401, {"errors": [{"code": "UNAUTHORIZED",
                                                "message": "invalid username or password"}]},
                              {"WWW-Authenticate": 'Basic realm="token"'})
        now = int(time.time())
        access = grant(args, user, scopes)
        claims = {"iss": args.issuer, "sub": user or "", "aud": args.service,
                  "exp": now + args.ttl, "nbf": now - 10, "iat": now,
                  "jti": secrets.token_hex(16), "access": access}
        token = sign_jwt(srv.key, srv.cert, args.jwt_header, claims)
        entry.update(status=200, anonymous=user is None, access=access, jti=claims["jti"],
                     exp=claims["exp"])
        srv.record(entry)
        issued = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
        self.reply(200, {"token": token, "access_token": token, "expires_in": args.ttl,
                         "issued_at": issued.strftime("%Y-%m-%dT%H:%M:%SZ")})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--issuer", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--deny-pull", action="append", default=[], metavar="REPO")
    p.add_argument("--deny-push", action="append", default=[], metavar="REPO")
    p.add_argument("--ttl", type=int, default=300)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--jwt-header", choices=("x5c", "kid"), default="x5c")
    p.add_argument("--lifetime", type=float, default=1800, help="exit after this many seconds")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)

    log = _common.setup_logging("token_server", args.verbose)
    _common.die_with_parent()
    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.daemon_threads = True
    srv.args, srv.log = args, log
    srv.key, srv.cert, cert_path = load_or_create_key(d, args.issuer)
    log_path = os.path.join(d, "token.log")
    log_fh, lock = open(log_path, "a"), threading.Lock()
    srv.record = lambda e: _common.write_jsonl(lock, log_fh, e)

    stop = lambda *_: threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _common.start_watchdog(args.lifetime, stop, log)
    addr = "%s:%d" % srv.server_address[:2]
    log.info("serving on %s (jwt header %s, ttl %ss)", addr, args.jwt_header, args.ttl)
    _common.ready({"addr": addr, "realm": f"http://{addr}/token", "rootcert": cert_path,
                   "log": log_path})
    srv.serve_forever(poll_interval=0.2)
    log.info("stopped")


if __name__ == "__main__":
    main()
