"""Images and trees of the wheels proof.

Images: the Python root of `tests.proof.pyroot` as the base layer (per architecture), and above
it a layer of what pip itself installed in a chroot of that root (`installed_root`): the
distributions of `tests.proof.wheelset.INSTALLED`, compiled to bytecode as a Dockerfile's
`RUN pip install` leaves them, so their RECORD, INSTALLER and `.pyc` files are pip's own. The
arm64 platform has Debian's arm64 packages below the same installed layer (pure Python).

Trees: an image unpacked by skopeo + umoci (`unpack`), pip run in a chroot of it (`pip_judge`),
and the comparison of two trees (`compare`): same paths, types, modes, bytes and link targets,
except what pip's documented install contract leaves free (INSTALLER's text, RECORD's row
order, a launcher's template, the interpreter path of a rewritten `#!python` line).
"""
from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

from imagekit.image import push
from imagekit.layer import Layer
from imagekit.media import AMD64, ARM64
from imagekit.registry import Client
from imagekit.tree import TreeLayer
from imagekit.wheel import record_hash
from tests.proof import pyroot, wheelset

SITE = pyroot.SITE
BIN = "usr/local/bin"
PLATFORM = {"amd64": AMD64, "arm64": ARM64}
EPOCH = "1700000000"


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr[-3000:]}"
    return r


def copy_root(src: Path, dest: Path) -> Path:
    """A copy of the root SRC (modes, links) at DEST, without the cache's marker."""
    run(["cp", "-a", str(src), str(dest)])
    (dest / pyroot.MARKER).unlink(missing_ok=True)
    return dest


def pip_install(root: Path, wheels: list[Path], requirements: list[str], compile_: bool = False,
                env_extra: dict | None = None, extra_args=()) -> subprocess.CompletedProcess:
    """`python3 -m pip install --no-deps --no-index --find-links` of REQUIREMENTS from the
    directory of WHEELS (copied into the root for the run, then removed), in a chroot of ROOT:
    pip picks the wheel by its own tags, and the install is not a direct-URL one (no
    `direct_url.json`)."""
    inbox = root / "wheels-in"
    inbox.mkdir()
    try:
        for w in wheels:
            shutil.copy2(w, inbox / Path(w).name)
        args = ["install", "--no-deps", "--no-index", "--find-links", "/wheels-in"]
        args += ([] if compile_ else ["--no-compile"]) + list(extra_args)
        cmd = [shutil.which("chroot") or "/usr/sbin/chroot", str(root), pyroot.PYTHON, "-m", "pip", *args,
               *requirements, "--break-system-packages"]
        env = {**pyroot.env(), **(env_extra or {})}
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, f"pip install {' '.join(requirements)} in {root}: {r.stdout}\n{r.stderr}"
        return r
    finally:
        shutil.rmtree(inbox)


def pip_for_platform(work: Path, wheels: list[Path], requirements: list[str], platform: str) -> Path:
    """What pip installs of REQUIREMENTS for another PLATFORM (`manylinux_2_17_aarch64`, CPython
    3.11): pip of the amd64 root, `--target` a directory (the only way pip installs for a
    platform it does not run on), choosing among WHEELS by their tags. Returns that directory."""
    root = copy_root(pyroot.build("amd64"), work)
    pip_install(root, wheels, requirements,
                extra_args=["--target", "/platform-site", "--platform", platform, "--python-version", "3.11",
                            "--implementation", "cp", "--abi", "cp311", "--only-binary=:all:"])
    return root / "platform-site"


def pip_layer(installed: Path, arch: str, wheels: list[Path], requirements: list[str], work: Path) -> Layer:
    """The layer pip's install of REQUIREMENTS (from WHEELS) adds above the root INSTALLED: in a
    chroot of a copy for amd64, `--target` the site directory with `--platform` for arm64."""
    created = "pip install " + " ".join(requirements)
    if arch == "amd64":
        after = copy_root(installed, work / "after-amd64")
        pip_install(after, wheels, requirements)
        return diff_layer(installed, after, created)
    site = pip_for_platform(work / "after-arm64", wheels, requirements, "manylinux_2_17_aarch64")
    layer = Layer(created)
    for rel, entry in sorted(snapshot(site).items()):
        if entry[0] == "dir":
            layer.dir(f"{SITE}/{rel}", entry[1])
        else:
            layer.file(f"{SITE}/{rel}", (site / rel).read_bytes(), entry[1])
    return layer


def installed_root(work: Path, wheels_dir: Path) -> Path:
    """The amd64 Python root with the fixture distributions installed by pip (with bytecode,
    `SOURCE_DATE_EPOCH` making it reproducible); asserts pip wrote nothing outside /usr/local."""
    base = pyroot.build("amd64")
    root = copy_root(base, work / "installed")
    before = snapshot(root)
    wheels = sorted(wheels_dir.glob("*.whl"))
    pip_install(root, wheels, [f"{n}=={v}" for n, v in wheelset.INSTALLED], compile_=True,
                env_extra={"SOURCE_DATE_EPOCH": EPOCH})
    after = snapshot(root)
    changed = [p for p in set(before) | set(after)
               if before.get(p) != after.get(p) and not p.startswith("usr/local/")]
    assert not changed, f"pip changed files outside /usr/local: {sorted(changed)[:20]}"
    return root


class Layers:
    """The fixture layers, built once: a base per architecture and the installed layer."""

    def __init__(self, work: Path, wheels_dir: Path):
        self.work = work
        inst = installed_root(work, wheels_dir)
        self.installed = TreeLayer("pip install " + " ".join(f"{n}=={v}" for n, v in wheelset.INSTALLED),
                                   str(inst), work / "installed.tar.gz", under=("usr/local",))
        self.base = {}
        for arch in ("amd64", "arm64"):
            root = pyroot.build(arch)
            self.base[arch] = TreeLayer(f"debian bookworm python3.11 {arch}", str(root),
                                        work / f"base-{arch}.tar.gz", skip={pyroot.MARKER})

    def push(self, addr: str, repo: str, tag: str, arches=("amd64",), style: str = "single",
             extra=None, env=None) -> dict:
        """The fixture image at ADDR/REPO:TAG for ARCHES (EXTRA: more layers per arch, a
        function of the arch; ENV: the config's Env, imagekit's default PATH when None);
        imagekit.image.push's answer."""
        client = Client(addr, repo)
        try:
            plats = {PLATFORM[a]: [self.base[a], self.installed, *(extra(a) if extra else [])] for a in arches}
            return push(client, tag, plats, style=style, **({"env": env} if env is not None else {}))
        finally:
            client.close()


def unpack(addr: str, repo: str, ref: str, arch: str, into: Path) -> Path:
    """One platform of ADDR/REPO at REF (`:tag` or `@sha256:...`) unpacked by umoci (which checks
    every diff_id) after a skopeo copy; the rootfs."""
    into.mkdir(parents=True, exist_ok=True)
    layout, bundle = into / "layout", into / "bundle"
    variant = ["--override-variant", "v8"] if arch == "arm64" else []
    run(["skopeo", "copy", "-q", "--src-tls-verify=false", "--override-os", "linux", "--override-arch", arch,
         *variant, f"docker://{addr}/{repo}{ref}", f"oci:{layout}:t"])
    run(["umoci", "unpack", "--image", f"{layout}:t", str(bundle)])
    return bundle / "rootfs"


def diff_layer(before: Path, after: Path, created_by: str) -> Layer:
    """A layer that turns the tree BEFORE into AFTER: what AFTER adds or changes (files with
    their modes, directories, links), and a whiteout for each path it drops (a dropped
    directory's whiteout stands for what was below it). The harness's reference of a correct
    patch layer, to show the judges pass what they must pass."""
    a, b = snapshot(before), snapshot(after)
    layer = Layer(created_by)
    for p in sorted(set(b), key=lambda p: p.split("/")):
        if a.get(p) == b[p]:
            continue
        kind = b[p][0]
        if kind == "dir":
            layer.dir(p, b[p][1])
        elif kind == "link":
            layer.symlink(p, b[p][1])
        else:
            layer.file(p, (after / p).read_bytes(), b[p][1])
    for p in sorted(set(a) - set(b)):
        if os.path.dirname(p) in set(a) - set(b):
            continue  # below a dropped directory
        layer.whiteout(p)
    return layer


# --- trees ------------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, tuple]:
    """{relative path: ("dir", mode) | ("link", target) | ("file", mode, sha256 hex, size)}."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", mode, st.st_uid, st.st_gid)
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(full, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                out[rel] = ("file", mode, h.hexdigest(), st.st_size, st.st_uid, st.st_gid)
            else:
                out[rel] = ("other", st.st_mode)
    return out


def resolve(root: Path, path: str) -> str:
    """PATH (absolute, inside ROOT) with every symbolic link followed as the container would."""
    parts, done, hops = [p for p in path.split("/") if p], [], 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            done = done[:-1]
            continue
        cur = root.joinpath(*done, part)
        if cur.is_symlink():
            hops += 1
            assert hops < 40, f"{path}: too many links in {root}"
            target = os.readlink(cur)
            parts = [p for p in target.split("/") if p] + parts
            if target.startswith("/"):
                done = []
            continue
        done.append(part)
    return "/" + "/".join(done)


def entry_points(root: Path) -> dict[str, str]:
    """{launcher path relative to the root: "module:attr"} of every console/gui script of the
    distributions installed in SITE."""
    out = {}
    for ep in sorted((root / SITE).glob("*.dist-info/entry_points.txt")):
        section = None
        for line in ep.read_text().splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]")
            elif "=" in line and section in ("console_scripts", "gui_scripts"):
                name, target = (s.strip() for s in line.split("=", 1))
                out[f"{BIN}/{name}"] = target
    return out


def launcher_imports(text: str, target: str) -> bool:
    """The launcher TEXT imports the entry point TARGET ("module:attr") and calls it."""
    mod, _, attr = target.partition(":")
    head = attr.split(".")[0]
    return (re.search(rf"\bfrom\s+{re.escape(mod)}\s+import\s+{re.escape(head)}\b", text) is not None
            or re.search(rf"import_module\(\s*['\"]{re.escape(mod)}['\"]", text) is not None
            or re.search(rf"\bimport\s+{re.escape(mod)}\b", text) is not None) and head in text


def record_rows(data: bytes, free: set[str]) -> set[tuple]:
    """RECORD's rows as a set, the hash and size of the paths in FREE (relative to the site
    directory) left out."""
    rows = set()
    for row in csv.reader(io.StringIO(data.decode())):
        if not row:
            continue
        path = row[0]
        rows.add((path, "*", "*") if path in free else tuple(row))
    return rows


def check_record(root: Path, record: str) -> list[str]:
    """Every row of the RECORD at ROOT/RECORD names a file that is there with that hash and size."""
    bad, site = [], (root / record).parent.parent
    for row in csv.reader(io.StringIO((root / record).read_text())):
        if not row or not row[1]:
            continue
        f = Path(os.path.normpath(site / row[0]))
        if not f.is_file():
            bad.append(f"{record}: {row[0]} is not there")
            continue
        data = f.read_bytes()
        if row[1] != record_hash(data) or row[2] != str(len(data)):
            bad.append(f"{record}: {row[0]} has {record_hash(data)},{len(data)}, RECORD says {row[1]},{row[2]}")
    return bad
