"""`wheels` patch folders for the proof: `patch.toml`, a PEP 751 `pylock.toml` (lock-version
1.0) naming each wheel by `path` (relative to the lock, the wheel copied into the folder) or by
`url` (served by `WheelServer`, a plain HTTP server of a directory on 127.0.0.1), with its
sha256 and size; and the broken locks the refusal tests hand in.
"""
from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
from pathlib import Path

from imagekit.wheel import Wheel, normalize, sha256_file

BACKEND = "cuda"


def _s(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's for this text)."""
    return json.dumps(value)


def _array(values) -> str:
    return "[" + ", ".join(_s(v) for v in values) + "]"


def wheel_entry(path: Path, ref: str, key: str = "path", sha256: str | None = None) -> str:
    """One `[[packages.wheels]]` table: the wheel at PATH, named in the lock as REF (a path
    relative to the lock, or a URL) under KEY, with its hash (SHA256 overrides it)."""
    digest = sha256 if sha256 is not None else sha256_file(path)
    return (f"[[packages.wheels]]\nname = {_s(path.name)}\n{key} = {_s(ref)}\n"
            f"size = {path.stat().st_size}\nhashes = {{sha256 = {_s(digest)}}}\n")


def lock_text(packages: list[tuple[str, str, list[str]]], markers: dict[str, str] | None = None,
              requires_python: str = ">=3.11") -> str:
    """A pylock.toml of PACKAGES: (name, version, [wheel tables]) each; MARKERS: a package's
    `marker` by name."""
    out = ['lock-version = "1.0"\ncreated-by = "runner-patch proof tests"\n'
           f"requires-python = {_s(requires_python)}\n"]
    for name, version, wheels in packages:
        out.append(f"\n[[packages]]\nname = {_s(normalize(name))}\nversion = {_s(version)}\n")
        if markers and name in markers:
            out.append(f"marker = {_s(markers[name])}\n")
        out += ["\n" + w for w in wheels]
    return "".join(out)


def patch_toml(pid: str, remove=(), target: str | None = None, package: str | None = None,
               lock: str | None = "pylock.toml") -> str:
    lines = [f"id = {_s(pid)}", 'kind = "wheels"', f"title = {_s('proof: ' + pid)}",
             f"backends = [{_s(BACKEND)}]"]
    if package:
        lines.append(f"package = {_s(package)}")
    if lock:
        lines.append(f"lock = {_s(lock)}")
    if remove:
        lines.append(f"remove = {_array(remove)}")
    if target:
        lines.append(f"target = {_s(target)}")
    return "\n".join(lines) + "\n"


def folder(dest: Path, pid: str, wheels: list[Wheel], *, remove=(), target: str | None = None,
           package: str | None = None, base_url: str | None = None, served: Path | None = None,
           markers: dict[str, str] | None = None, requires_python: str = ">=3.11") -> Path:
    """A patch folder at DEST locking WHEELS (grouped by package, in order): each wheel copied
    into DEST/wheels/ and locked by `path`, or, with BASE_URL, written into SERVED (the server's
    directory) and locked by `url`; MARKERS and REQUIRES_PYTHON as in `lock_text`."""
    dest.mkdir(parents=True)
    by_pkg: dict[tuple[str, str], list[str]] = {}
    for w in wheels:
        if base_url is None:
            p = w.write(dest / "wheels")
            entry = wheel_entry(p, f"wheels/{p.name}")
        else:
            p = w.write(served)
            entry = wheel_entry(p, f"{base_url}/{p.name}", key="url")
        by_pkg.setdefault((w.name, w.version), []).append(entry)
    (dest / "pylock.toml").write_text(lock_text([(n, v, e) for (n, v), e in by_pkg.items()], markers,
                                                requires_python))
    (dest / "patch.toml").write_text(patch_toml(pid, remove, target, package, lock="pylock.toml" if wheels else None))
    return dest


class WheelServer:
    """A plain HTTP server of DIRECTORY on 127.0.0.1 (a free port), in a thread:
    `with WheelServer(d) as url: ...` (URL without a trailing slash)."""

    def __init__(self, directory: Path):
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.requests: list[str] = []
        self.httpd.requests = self.requests

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        self.server.requests.append(self.path)


def copy_wheels(paths, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for p in paths:
        shutil.copy2(p, dest / Path(p).name)
    return dest
