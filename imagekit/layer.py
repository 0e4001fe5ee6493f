"""Deterministic tar layers: fixed headers (mtime, owner), entries in the order a directory walk
with sorted names gives, parent directories added, gzip without a name or mtime. Two builders:
`Layer` in memory (small fixture layers) and `StreamLayer`, which streams tar -> gzip -> file and
never holds a layer (the benchmark's are about 1.5 GiB).

Entries given to either are tuples `(path, kind, data[, mode])`: kind "file" (data: bytes or
str), "dir" (data: the mode) or "symlink" (data: the link target).
"""

import gzip
import hashlib
import io
import tarfile
import zlib

from imagekit.digest import sha256

MTIME = 1700000000
MIB = 1 << 20


def walk_key(path):
    """Sort key of a path in a walk with names sorted bytewise in each directory."""
    return [p.encode() for p in path.split("/")]


def walk_order(entries):
    """ENTRIES (tuples starting with a path) in directory-walk order."""
    return sorted(entries, key=lambda e: walk_key(e[0]))


def gzip_bytes(raw, level=6):
    """RAW in gzip, with neither a file name nor an mtime in the header (reproducible bytes)."""
    out = io.BytesIO()
    with gzip_writer(out, level) as g:
        g.write(raw)
    return out.getvalue()


def gzip_writer(out, level=6):
    """A gzip stream into OUT with neither a file name nor an mtime in the header."""
    return gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=level, mtime=0)


class Layer:
    """An ordered set of tar entries held in memory; parents get directory entries
    automatically, a path given twice keeps the last."""

    def __init__(self, created_by, fmt="pax", comment=None):
        self.created_by = created_by
        self.comment = comment
        self.fmt = fmt
        self.entries = {}  # path -> (kind, data, mode)

    def _parents(self, path):
        parts = path.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in self.entries:
                self.entries[d] = ("dir", None, 0o755)

    def dir(self, path, mode=0o755):
        path = path.strip("/")
        self._parents(path)
        self.entries[path] = ("dir", None, mode)
        return self

    def file(self, path, data, mode=0o644):
        path = path.strip("/")
        if isinstance(data, str):
            data = data.encode()
        self._parents(path)
        self.entries[path] = ("file", bytes(data), mode)
        return self

    def symlink(self, path, target):
        path = path.strip("/")
        self._parents(path)
        self.entries[path] = ("symlink", target, 0o777)
        return self

    def whiteout(self, path):
        """Hide PATH (file or directory) of lower layers."""
        path = path.strip("/")
        d, _, base = path.rpartition("/")
        return self.file((d + "/" if d else "") + ".wh." + base, b"", 0o644)

    def opaque(self, dirpath):
        """Hide all lower contents of DIRPATH (entries of this layer stay)."""
        dirpath = dirpath.strip("/")
        self.dir(dirpath)
        return self.file(dirpath + "/.wh..wh..opq", b"", 0o644)

    def add(self, entries):
        """Adds `(path, kind, data[, mode])` entries (see the module's doc)."""
        for e in entries:
            path, kind, data = e[:3]
            if kind == "file":
                self.file(path, data, *e[3:])
            elif kind == "dir":
                self.dir(path, data)
            elif kind == "symlink":
                self.symlink(path, data)
            else:
                raise ValueError(f"{path}: unknown entry kind {kind!r}")
        return self

    def ordered(self):
        return sorted(self.entries.items(), key=lambda kv: walk_key(kv[0]))

    def tar(self):
        buf = io.BytesIO()
        fmt = tarfile.GNU_FORMAT if self.fmt == "gnu" else tarfile.PAX_FORMAT
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
            for path, (kind, data, mode) in self.ordered():
                ti = tarfile.TarInfo(path)
                ti.mtime = MTIME
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = "root"
                ti.mode = mode
                if kind == "dir":
                    ti.type = tarfile.DIRTYPE
                    tf.addfile(ti)
                elif kind == "symlink":
                    ti.type = tarfile.SYMTYPE
                    ti.linkname = data
                    tf.addfile(ti)
                else:
                    ti.type = tarfile.REGTYPE
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
        return buf.getvalue()

    def build(self, level=6):
        """{"tar", "blob" (gzip), "diff_id", "digest"}."""
        raw = self.tar()
        blob = gzip_bytes(raw, level)
        return {"tar": raw, "blob": blob, "diff_id": sha256(raw), "digest": sha256(blob)}


class StreamLayer:
    """Writes a PAX tar stream through gzip (zlib at LEVEL, no name, mtime 0) into PATH + ".part",
    hashing both sides; `close` returns the layer's digest, diff_id and sizes (the caller renames
    the file into place).

    Entries must come in directory-walk order (see `walk_order`); parent directories are emitted
    automatically the first time a path needs them.
    """

    CHUNK = 4 * MIB

    def __init__(self, path, level):
        self.path = path
        self.f = open(path + ".part", "wb")
        self.z = zlib.compressobj(level, zlib.DEFLATED, 31)  # gzip, mtime 0, no name
        self.diff = hashlib.sha256()
        self.dig = hashlib.sha256()
        self.buf = bytearray()
        self.usize = self.csize = 0
        self.dirs = set()
        self.files = 0

    def _out(self, b):
        self.buf += b
        if len(self.buf) >= self.CHUNK:
            self._flush()

    def _flush(self, final=False):
        data = bytes(self.buf)
        self.buf.clear()
        self.diff.update(data)
        self.usize += len(data)
        c = self.z.compress(data)
        if final:
            c += self.z.flush()
        self.dig.update(c)
        self.csize += len(c)
        self.f.write(c)

    def _header(self, path, type_, mode, size=0, link=""):
        ti = tarfile.TarInfo(path)
        ti.type, ti.mode, ti.size, ti.linkname = type_, mode, size, link
        ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = MTIME, 0, 0, "root", "root"
        self._out(ti.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))

    def _parents(self, path):
        parts = path.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in self.dirs:
                self.dir(d)

    def dir(self, path, mode=0o755):
        self._parents(path)
        self.dirs.add(path)
        self._header(path, tarfile.DIRTYPE, mode)

    def file(self, path, data, mode=0o644):
        if isinstance(data, str):
            data = data.encode()
        self._parents(path)
        self._header(path, tarfile.REGTYPE, mode, len(data))
        self._out(data)
        pad = -len(data) % 512
        if pad:
            self._out(b"\0" * pad)
        self.files += 1

    def symlink(self, path, target):
        self._parents(path)
        self._header(path, tarfile.SYMTYPE, 0o777, link=target)

    def close(self):
        self._out(b"\0" * 1024)  # end-of-archive marker
        total = self.usize + len(self.buf)
        self._out(b"\0" * (-total % tarfile.RECORDSIZE))
        self._flush(final=True)
        self.f.close()
        return {"digest": "sha256:" + self.dig.hexdigest(), "diff_id": "sha256:" + self.diff.hexdigest(),
                "size": self.csize, "uncompressed": self.usize, "files": self.files}


def write_entries(path, entries, level):
    """Streams ENTRIES (any order: they are sorted here) into a layer file; see StreamLayer."""
    w = StreamLayer(path, level)
    for e in walk_order(entries):
        kind = e[1]
        if kind == "file":
            w.file(e[0], e[2], e[3] if len(e) > 3 else 0o644)
        elif kind == "dir":
            w.dir(e[0], e[2])
        elif kind == "symlink":
            w.symlink(e[0], e[2])
        else:
            raise ValueError(f"{e[0]}: unknown entry kind {kind!r}")
    return w.close()
