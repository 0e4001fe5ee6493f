"""sha256 digests of bytes and of streams, in the registry's `sha256:<hex>` form."""

import hashlib


def sha256(data):
    """The digest of DATA (bytes-like) as a registry names it."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


class HashingReader:
    """Wraps a readable stream and hashes and counts what is read through it."""

    def __init__(self, f):
        self.f, self.h, self.size = f, hashlib.sha256(), 0

    def read(self, n=-1):
        b = self.f.read(n)
        self.h.update(b)
        self.size += len(b)
        return b

    def drain(self):
        """Reads the rest of the stream, so that the digest covers all of it."""
        while self.read(1 << 16):
            pass

    @property
    def digest(self):
        return "sha256:" + self.h.hexdigest()


class HashingWriter:
    """Hashes and counts what is written and passes it on to OUT (e.g. a tar into gzip: the
    hash is the layer's diff_id)."""

    def __init__(self, out):
        self.out, self.h, self.size = out, hashlib.sha256(), 0

    def write(self, b):
        self.h.update(b)
        self.size += len(b)
        return self.out.write(b)

    @property
    def digest(self):
        return "sha256:" + self.h.hexdigest()
