"""An image for the `wheels` kind's integration tests (tests/it/wheels.rs), pushed to a registry:
a libc naming glibc 2.36, a Python 3.11 interpreter (bytes that are no program: the kind reads
its path and version only), and `demo` 1.0 installed in /usr/local/lib/python3.11/dist-packages
as pip leaves it (its RECORD hashes right), with a module 2.0 no longer has, and `needs-demo`
1.0, which requires demo<2 (so upgrading demo breaks it, as `pip check` says).

    python3 -m tests.support.wheels_image --registry HOST:PORT --repository NAME --tag TAG

Prints the tag's digest.
"""

import argparse
import base64
import hashlib

from imagekit.image import push
from imagekit.layer import Layer
from imagekit.media import AMD64
from imagekit.registry import Client

SITE = "usr/local/lib/python3.11/dist-packages"


def row(path, data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={h},{len(data)}"


def dist(layer, name, version, files, requires=()):
    """Installs `files` ({path under the site dir: bytes}) and the dist-info pip writes."""
    di = f"{name.replace('-', '_')}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires) + "\n"
    files = dict(files)
    files[f"{di}/METADATA"] = meta.encode()
    files[f"{di}/INSTALLER"] = b"pip\n"
    rows = [row(p, d) for p, d in files.items()] + [f"{di}/RECORD,,"]
    files[f"{di}/RECORD"] = ("\n".join(rows) + "\n").encode()
    for p, d in files.items():
        layer.file(f"{SITE}/{p}", d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--registry", required=True)
    ap.add_argument("--repository", required=True)
    ap.add_argument("--tag", required=True)
    a = ap.parse_args()
    base = Layer("debian base")
    base.file("usr/lib/x86_64-linux-gnu/libc.so.6",
              b"\x7fELF GNU C Library (Debian GLIBC 2.36-9) stable release version 2.36.\n")
    base.file("usr/bin/python3.11", b"\x7fELF python 3.11.2", mode=0o755)
    base.symlink("usr/bin/python3", "python3.11")
    base.dir(SITE)
    app = Layer("pip install demo==1.0 needs-demo==1.0")
    dist(app, "demo", "1.0", {"demo/__init__.py": b"V = 1\n", "demo/old.py": b"OLD = True\n"})
    dist(app, "needs-demo", "1.0", {"needs_demo.py": b"import demo\n"}, requires=["demo<2"])
    client = Client(a.registry, a.repository)
    print(push(client, a.tag, {AMD64: [base, app]}, style="oci")["digest"])


if __name__ == "__main__":
    main()
