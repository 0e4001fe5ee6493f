"""Test wheels in the PyPA binary distribution format (PEP 427, PEP 491): `WHEEL`, `METADATA`
with `Requires-Dist`, `entry_points.txt` with console scripts, a `RECORD` of urlsafe-base64
sha256 hashes, and optionally a `<name>-<version>.data/` directory (scripts with a `#!python`
first line, purelib, platlib, headers, data). Pure (`py3-none-any`) or tagged for one
interpreter and platform (`cp311-cp311-manylinux_2_17_x86_64`). The bytes are reproducible:
fixed entry times and modes, sorted names, the `.dist-info` directory last and `RECORD` the
last entry of all, as PEP 427 recommends.

    w = Wheel("demo-pkg", "2.0", files={"demo_pkg/__init__.py": "..."},
              console_scripts={"demo": "demo_pkg.cli:main"}, requires=["base-lib>=1.0"],
              extras={"fancy": ["fancy-lib>=1.0"]})     # Provides-Extra, and a marked Requires-Dist
    path = w.write(directory)          # directory/demo_pkg-2.0-py3-none-any.whl
"""

import base64
import hashlib
import io
import re
import zipfile
from pathlib import Path

DATE = (2020, 1, 1, 0, 0, 0)
DATA_KEYS = ("scripts", "purelib", "platlib", "headers", "data")


def normalize(name):
    """The PEP 503 normalised name (`Demo_Pkg` -> `demo-pkg`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def escape(name):
    """The name as a wheel's file name and `.dist-info` directory spell it (`demo_pkg`)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def record_hash(data):
    """`sha256=<urlsafe base64, no padding>` of DATA, as RECORD writes it."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _bytes(data):
    return data.encode() if isinstance(data, str) else bytes(data)


class Wheel:
    """One wheel. FILES: {path in the archive: bytes or str, or (bytes or str, mode)}; DATA:
    {"scripts"|"purelib"|"platlib"|"headers"|"data": {relative path: same}}; TAG: the
    `python-abi-platform` tag triple (pure wheels are purelib, others platlib)."""

    def __init__(self, name, version, *, files=None, data=None, console_scripts=None,
                 gui_scripts=None, requires=(), requires_python=None, tag="py3-none-any",
                 summary=None, extras=None):
        for key in data or {}:
            if key not in DATA_KEYS:
                raise ValueError(f"{name} {version}: unknown .data directory {key!r}")
        self.name, self.version, self.tag = name, version, tag
        self.files = dict(files or {})
        self.data = {k: dict(v) for k, v in (data or {}).items()}
        self.console_scripts = dict(console_scripts or {})
        self.gui_scripts = dict(gui_scripts or {})
        self.requires = list(requires)
        self.extras = {k: list(v) for k, v in (extras or {}).items()}
        self.requires_python = requires_python
        self.summary = summary or f"{name} {version}, a test wheel"

    @property
    def pure(self):
        return self.tag.endswith("-none-any")

    @property
    def filename(self):
        return f"{escape(self.name)}-{self.version}-{self.tag}.whl"

    @property
    def dist_info(self):
        return f"{escape(self.name)}-{self.version}.dist-info"

    @property
    def data_dir(self):
        return f"{escape(self.name)}-{self.version}.data"

    def _metadata(self):
        lines = ["Metadata-Version: 2.1", f"Name: {self.name}", f"Version: {self.version}",
                 f"Summary: {self.summary}"]
        if self.requires_python:
            lines.append(f"Requires-Python: {self.requires_python}")
        lines += [f"Requires-Dist: {r}" for r in self.requires]
        for extra, reqs in sorted(self.extras.items()):
            lines.append(f"Provides-Extra: {extra}")
            lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
        return "\n".join(lines) + "\n\n"

    def _wheel_file(self):
        tags = self.tag.split("-")
        return ("Wheel-Version: 1.0\nGenerator: imagekit.wheel\n"
                f"Root-Is-Purelib: {'true' if self.pure else 'false'}\n"
                + "".join(f"Tag: {py}-{tags[1]}-{tags[2]}\n" for py in tags[0].split(".")))

    def _entry_points(self):
        out = []
        for section, scripts in (("console_scripts", self.console_scripts), ("gui_scripts", self.gui_scripts)):
            if scripts:
                out.append(f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(scripts.items())))
        return "\n".join(out)

    def entries(self):
        """[(archive path, bytes, mode)] in archive order, RECORD last."""
        body = []
        for path, val in self.files.items():
            body.append((path, *self._content(val)))
        for key, files in self.data.items():
            for rel, val in files.items():
                body.append((f"{self.data_dir}/{key}/{rel}", *self._content(val)))
        body.sort(key=lambda e: e[0])
        meta = [(f"{self.dist_info}/METADATA", self._metadata().encode(), 0o644),
                (f"{self.dist_info}/WHEEL", self._wheel_file().encode(), 0o644)]
        ep = self._entry_points()
        if ep:
            meta.append((f"{self.dist_info}/entry_points.txt", ep.encode(), 0o644))
        meta.sort(key=lambda e: e[0])
        rows = [f"{p},{record_hash(d)},{len(d)}\n" for p, d, _ in body + meta]
        record = "".join(rows) + f"{self.dist_info}/RECORD,,\n"
        return body + meta + [(f"{self.dist_info}/RECORD", record.encode(), 0o644)]

    @staticmethod
    def _content(val):
        if isinstance(val, tuple):
            return _bytes(val[0]), val[1]
        return _bytes(val), 0o644

    def bytes(self, entries=None):
        """The wheel's bytes; ENTRIES (as `entries()` gives them) replace its own, to make a
        broken one."""
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            for path, data, mode in self.entries() if entries is None else entries:
                zi = zipfile.ZipInfo(path, DATE)
                zi.external_attr = (0o100000 | mode) << 16
                zi.compress_type = zipfile.ZIP_DEFLATED
                zi.create_system = 3
                zf.writestr(zi, data)
        return buf.getvalue()

    def write(self, directory, entries=None):
        """Writes the wheel (or one of ENTRIES, see `bytes`) into DIRECTORY under its PEP 427
        file name; returns the path."""
        path = Path(directory) / self.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.bytes(entries))
        return path


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_record(path):
    """Every RECORD row of the wheel at PATH matches its entry (hash and size), and every entry
    has a row; returns the number of entries. Raises ValueError naming the first mismatch."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        rec = [n for n in names if n.endswith(".dist-info/RECORD")]
        if len(rec) != 1:
            raise ValueError(f"{path}: {len(rec)} RECORD files")
        rows = {}
        for line in zf.read(rec[0]).decode().splitlines():
            p, h, s = line.rsplit(",", 2)
            rows[p] = (h, s)
        for n in names:
            if n == rec[0]:
                continue
            data = zf.read(n)
            if rows.get(n) != (record_hash(data), str(len(data))):
                raise ValueError(f"{path}: RECORD row of {n} is {rows.get(n)}")
        if set(rows) != set(names):
            raise ValueError(f"{path}: RECORD names {sorted(set(rows) ^ set(names))} not in the archive")
        return len(names)
