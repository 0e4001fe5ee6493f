#!/usr/bin/env python3
"""Auth files and configs for a throw-away CNCF distribution 2.8.x registry.

    python3 -m tests.support.registry_auth htpasswd --dir DIR --user U --password P
        writes DIR/htpasswd (one bcrypt `$2b$` line, from Python's crypt module)
        and prints the YAML `auth:` snippet for distribution's config.
    python3 -m tests.support.registry_auth config --dir DIR --port N --auth none|htpasswd|token
        [--token-realm URL --service S --issuer I --rootcert FILE]
        writes DIR/config.yml: version 0.1, filesystem storage in DIR/storage,
        delete enabled, http.addr 127.0.0.1:N, log level info, access log on.
        `--auth htpasswd` uses DIR/htpasswd (create it first). Prints one JSON
        line {"config": PATH, "addr": "127.0.0.1:N", "auth": MODE}.

Start the registry with `docker-registry serve DIR/config.yml`.
Scalars are written double-quoted (JSON strings are valid YAML).
"""

import argparse
import json
import os
import sys
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt  # deprecated in 3.11, removed in 3.13; fine for 3.11

REALM = "runner-patch-test"


def q(s):
    return json.dumps(str(s))


def bcrypt_line(user, password):
    if ":" in user:
        raise SystemExit("htpasswd user must not contain ':'")
    hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 10))
    if not hashed or not hashed.startswith("$2b$"):
        raise SystemExit(f"crypt() did not produce a bcrypt hash: {hashed!r}")
    return f"{user}:{hashed}\n"


def htpasswd_snippet(path):
    return f"auth:\n  htpasswd:\n    realm: {q(REALM)}\n    path: {q(path)}\n"


def token_snippet(realm, service, issuer, rootcert):
    return (
        "auth:\n  token:\n"
        f"    realm: {q(realm)}\n    service: {q(service)}\n"
        f"    issuer: {q(issuer)}\n    rootcertbundle: {q(rootcert)}\n"
    )


def config_text(d, port, auth_yaml):
    return (
        "version: 0.1\n"
        "log:\n  level: info\n  accesslog:\n    disabled: false\n"
        "storage:\n"
        f"  filesystem:\n    rootdirectory: {q(os.path.join(d, 'storage'))}\n"
        "  delete:\n    enabled: true\n"
        "  maintenance:\n    uploadpurging:\n      enabled: false\n"
        "http:\n"
        f"  addr: {q(f'127.0.0.1:{port}')}\n"
        "  headers:\n    X-Content-Type-Options: [nosniff]\n"
        + auth_yaml
    )


def cmd_htpasswd(a):
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.abspath(os.path.join(a.dir, "htpasswd"))
    with open(path, "w") as f:
        f.write(bcrypt_line(a.user, a.password))
    sys.stdout.write(htpasswd_snippet(path))


def cmd_config(a):
    d = os.path.abspath(a.dir)
    os.makedirs(os.path.join(d, "storage"), exist_ok=True)
    if a.auth == "none":
        auth = ""
    elif a.auth == "htpasswd":
        path = os.path.join(d, "htpasswd")
        if not os.path.isfile(path):
            # distribution 2.8 would create its own file with a random password
            raise SystemExit(f"{path} missing: run `registry_auth.py htpasswd` first")
        auth = htpasswd_snippet(path)
    else:
        missing = [n for n in ("token_realm", "service", "issuer", "rootcert")
                   if not getattr(a, n)]
        if missing:
            raise SystemExit("--auth token needs " + ", ".join(
                "--" + m.replace("_", "-") for m in missing))
        auth = token_snippet(a.token_realm, a.service, a.issuer,
                             os.path.abspath(a.rootcert))
    path = os.path.join(d, "config.yml")
    with open(path, "w") as f:
        f.write(config_text(d, a.port, auth))
    print(json.dumps({"config": path, "addr": f"127.0.0.1:{a.port}", "auth": a.auth}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("htpasswd", help="write DIR/htpasswd, print the auth snippet")
    h.add_argument("--dir", required=True)
    h.add_argument("--user", required=True)
    h.add_argument("--password", required=True)
    c = sub.add_parser("config", help="write DIR/config.yml")
    c.add_argument("--dir", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--auth", choices=("none", "htpasswd", "token"), default="none")
    c.add_argument("--token-realm")
    c.add_argument("--service")
    c.add_argument("--issuer")
    c.add_argument("--rootcert")
    a = p.parse_args(argv)
    {"htpasswd": cmd_htpasswd, "config": cmd_config}[a.cmd](a)


if __name__ == "__main__":
    main()
