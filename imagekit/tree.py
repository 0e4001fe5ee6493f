"""A layer made from a directory on disk (a root filesystem, or the part of one a command
changed), streamed tar -> gzip -> file with the deterministic headers of `imagekit.layer`:
regular files with their modes, directories, symbolic links; the entries in directory-walk
order. Files are read one at a time, never the whole layer.

    base = TreeLayer("debian python3.11", "/path/to/root", "/tmp/base.tar.gz")
    imagekit.image.push(client, tag, {AMD64: [base, ...]})
"""

import os
import stat

from imagekit.layer import StreamLayer, walk_key


def tree_entries(root, under=("",), skip=()):
    """(relative path, lstat) of everything below ROOT whose path starts with one of UNDER and
    is not in SKIP (relative paths, which are left out with what is below them)."""
    out = []
    for top in under:
        start = os.path.join(root, top) if top else root
        for dirpath, dirnames, filenames in os.walk(start):
            rel_dir = os.path.relpath(dirpath, root)
            rel_dir = "" if rel_dir == "." else rel_dir
            dirnames[:] = [d for d in dirnames if os.path.join(rel_dir, d) not in skip]
            for name in dirnames + filenames:
                rel = os.path.join(rel_dir, name)
                if rel not in skip:
                    out.append((rel, os.lstat(os.path.join(root, rel))))
        if top:
            # the directories down to TOP themselves
            parts = top.split("/")
            for i in range(1, len(parts) + 1):
                rel = "/".join(parts[:i])
                out.append((rel, os.lstat(os.path.join(root, rel))))
    seen, uniq = set(), []
    for rel, st in sorted(out, key=lambda e: walk_key(e[0])):
        if rel not in seen:
            seen.add(rel)
            uniq.append((rel, st))
    return uniq


class TreeLayer:
    """A layer of the directory ROOT (only the parts UNDER, minus SKIP), written once to
    OUT_PATH when first built; `build()` answers {"path", "digest", "diff_id", "size"}, which
    `imagekit.image.push` uploads from the file."""

    def __init__(self, created_by, root, out_path, under=("",), skip=(), level=6):
        self.created_by = created_by
        self.root, self.out_path, self.under, self.skip, self.level = root, str(out_path), under, set(skip), level
        self._built = None

    def build(self):
        if self._built is None:
            w = StreamLayer(self.out_path, self.level)
            for rel, st in tree_entries(self.root, self.under, self.skip):
                full = os.path.join(self.root, rel)
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode):
                    w.symlink(rel, os.readlink(full))
                elif stat.S_ISDIR(st.st_mode):
                    w.dir(rel, mode)
                elif stat.S_ISREG(st.st_mode):
                    with open(full, "rb") as f:
                        w.file(rel, f.read(), mode)
                else:
                    raise ValueError(f"{full}: neither a file, a directory nor a symbolic link")
            done = w.close()
            os.replace(self.out_path + ".part", self.out_path)
            self._built = {"path": self.out_path, "digest": done["digest"], "diff_id": done["diff_id"],
                           "size": done["size"]}
        return self._built
