"""containerd as a judge of the images runner-patch writes: the runtime that unpacks them on GPU
nodes, whose whiteout handling differs from umoci's (docs/testing.md). A throw-away containerd
(its own root, state and socket, the CRI plugin off, no system service) pulls an image from a
plain-HTTP registry, unpacks every platform with a snapshotter, and shows each platform's root
filesystem as a read-only directory.

    with Containerd() as ctd:
        ctd.pull("127.0.0.1:5000/gpustack/runner:tag", "overlayfs")
        with ctd.rootfs("127.0.0.1:5000", "gpustack/runner", "tag", "linux/amd64", "overlayfs") as root:
            unreadable(root)   # entries `ls -l` shows as `c?????????`

    python3 -m tests.support.containerd check --registry ADDR --repository REPO --tag TAG \
        [--path /abs/file ...] [--list /abs/dir ...]   # one JSON line per platform and snapshotter

Needs root (overlay mounts) and the Debian package `containerd` (`containerd`, `ctr`). Facts it
relies on (containerd 1.6): `ctr` flags go before positional arguments; a snapshot is read with
`ctr snapshots view --mounts` (the native snapshotter answers with a bind of its directory, the
overlayfs one with an overlay mount to make); `ctr images mount` would use overlayfs whatever
snapshotter is asked for, so it is not used.
"""

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

from imagekit.media import INDEXES, plat_name
from imagekit.registry import Client

SNAPSHOTTERS = ("native", "overlayfs")
NAMESPACE = "runner-patch-tests"


class ContainerdError(RuntimeError):
    pass


def chain_id(diff_ids):
    """The snapshot key of a layer stack: the OCI image-spec ChainID of its diff_ids."""
    chain = diff_ids[0]
    for d in diff_ids[1:]:
        chain = "sha256:" + hashlib.sha256(f"{chain} {d}".encode()).hexdigest()
    return chain


def platform_configs(addr, repository, tag):
    """{os/arch[/variant]: config JSON} of every image platform of a tag (attestations left
    out), read from the registry with imagekit's client, which checks every digest."""
    reg = Client(addr, repository)
    try:
        mt, body = reg.manifest(tag)
        doc = json.loads(body)
        mt = doc.get("mediaType") or mt.split(";")[0]
        children = []
        if mt in INDEXES:
            for m in doc["manifests"]:
                name = plat_name(m.get("platform", {}))
                if name != "unknown/unknown":
                    children.append(json.loads(reg.manifest(m["digest"])[1]))
        else:
            children.append(doc)
        out = {}
        for child in children:
            cfg = json.loads(reg.blob(child["config"]["digest"]))
            out[plat_name(cfg)] = cfg
        return out
    finally:
        reg.close()


class Containerd:
    """A containerd process of its own; `with` starts it and stops it (unmounting whatever it
    mounted, removing its root)."""

    def __init__(self, workdir=None):
        self.own_dir = workdir is None
        self.dir = workdir or tempfile.mkdtemp(prefix="ctd-")
        self.sock = os.path.join(self.dir, "c.sock")
        self.proc = None
        self.mounts = []

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self, timeout=30):
        if shutil.which("containerd") is None or shutil.which("ctr") is None:
            raise ContainerdError("containerd is not installed (Debian package `containerd`; .ci/run installs it)")
        os.makedirs(self.dir, exist_ok=True)
        cfg = os.path.join(self.dir, "config.toml")
        with open(cfg, "w") as f:
            f.write("version = 2\n"
                    f"root = \"{self.dir}/root\"\n"
                    f"state = \"{self.dir}/state\"\n"
                    "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"
                    "[grpc]\n"
                    f"  address = \"{self.sock}\"\n")
        log = open(os.path.join(self.dir, "containerd.log"), "ab")
        self.proc = subprocess.Popen(["containerd", "--config", cfg], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise ContainerdError(f"containerd exited with {self.proc.returncode}: {self.log()}")
            ok = subprocess.run(["ctr", "--address", self.sock, "version"], capture_output=True)
            if ok.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise ContainerdError(f"containerd did not answer within {timeout} s: {self.log()}")
            time.sleep(0.2)

    def log(self, lines=20):
        try:
            with open(os.path.join(self.dir, "containerd.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self):
        for m in reversed(self.mounts):
            subprocess.run(["umount", m], capture_output=True)
        self.mounts.clear()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def ctr(self, *args, check=True):
        """`ctr` against this containerd; stdout, or ContainerdError naming the command."""
        cmd = ["ctr", "--address", self.sock, "--namespace", NAMESPACE, *args]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise ContainerdError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip() or r.stdout.strip()}")
        return r

    def pull(self, ref, snapshotter, platforms):
        """Pulls REF over plain HTTP and unpacks each of PLATFORMS with SNAPSHOTTER; a failure
        (a layer containerd refuses, a wrong diff_id) raises with containerd's own message."""
        args = ["images", "pull", "--plain-http", "--snapshotter", snapshotter]
        for p in platforms:
            args += ["--platform", p]
        return self.ctr(*args, ref).stdout

    @contextlib.contextmanager
    def rootfs(self, addr, repository, tag, platform, snapshotter):
        """The unpacked root filesystem of one platform, read-only, as a directory."""
        cfg = platform_configs(addr, repository, tag)[platform]
        chain = chain_id(cfg["rootfs"]["diff_ids"])
        key = f"view-{snapshotter}-{hashlib.sha256((tag + platform).encode()).hexdigest()[:12]}"
        out = self.ctr("snapshots", "--snapshotter", snapshotter, "view", "--mounts", key, chain).stdout
        mounts = json.loads(out)
        target = None
        try:
            if len(mounts) != 1:
                raise ContainerdError(f"{snapshotter} view of {chain}: {len(mounts)} mounts: {out}")
            m = mounts[0]
            if m["Type"] == "bind":
                # The native snapshotter's committed directory itself.
                target = None
                yield m["Source"]
            else:
                target = tempfile.mkdtemp(prefix="rootfs-", dir=self.dir)
                opts = ",".join(["ro"] + [o for o in m["Options"] if o not in ("rw", "ro")])
                r = subprocess.run(["mount", "-t", m["Type"], m["Source"], "-o", opts, target],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    raise ContainerdError(f"mount {m['Type']} for {platform}: {r.stderr.strip()}")
                self.mounts.append(target)
                yield target
        finally:
            if target is not None and target in self.mounts:
                subprocess.run(["umount", target], capture_output=True)
                self.mounts.remove(target)
            self.ctr("snapshots", "--snapshotter", snapshotter, "rm", key, check=False)


def unreadable(root):
    """Entries the directory lists but that cannot be stat'ed, or that are whiteout devices
    (character devices 0/0): what `ls -l` shows as `c?????????` or `c---------`, relative to ROOT."""
    out = []
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            names = os.listdir(d)
        except OSError:
            out.append(os.path.relpath(d, root))
            continue
        for n in names:
            p = os.path.join(d, n)
            try:
                st = os.lstat(p)
            except OSError:
                out.append(os.path.relpath(p, root))
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                out.append(os.path.relpath(p, root))
            elif stat.S_ISDIR(st.st_mode):
                stack.append(p)
    return sorted(out)


def describe(root, path):
    """What the root filesystem shows at PATH (followed as the kernel does, inside ROOT): None,
    or {"sha256", "mode", "uid", "gid"} of the file."""
    real = resolve_inside(root, path)
    try:
        st = os.stat(real)
        with open(real, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return {"sha256": "sha256:" + hashlib.sha256(data).hexdigest(), "mode": stat.S_IMODE(st.st_mode),
            "uid": st.st_uid, "gid": st.st_gid}


def resolve_inside(root, path, limit=40):
    """PATH resolved with every link followed inside ROOT (absolute targets from ROOT, as in the
    container; the host's realpath would resolve them against the host)."""
    parts = [p for p in path.split("/") if p]
    done = []
    hops = 0
    while parts:
        c = parts.pop(0)
        if c in ("", "."):
            continue
        if c == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(root, *done, c)
        if os.path.islink(here):
            hops += 1
            if hops > limit:
                raise ContainerdError(f"too many links from {path}")
            to = os.readlink(here)
            if to.startswith("/"):
                done = []
            parts = [p for p in to.split("/") if p] + parts
            continue
        done.append(c)
    return os.path.join(root, *done)


def listing(root, path):
    """The names in directory PATH of ROOT (links followed inside ROOT), or None."""
    try:
        return sorted(os.listdir(resolve_inside(root, path)))
    except OSError:
        return None


def check(addr, repository, tag, paths=(), snapshotters=SNAPSHOTTERS, dirs=()):
    """Pulls a tag with each snapshotter and reports, per platform, the files at PATHS, the
    names in DIRS and the unreadable entries: [{"platform", "snapshotter", "files": {path:
    describe()}, "lists": {dir: names}, "unreadable"}]."""
    configs = platform_configs(addr, repository, tag)
    ref = f"{addr}/{repository}:{tag}"
    out = []
    with Containerd() as ctd:
        for snap in snapshotters:
            ctd.pull(ref, snap, sorted(configs))
            for plat in sorted(configs):
                with ctd.rootfs(addr, repository, tag, plat, snap) as root:
                    out.append({"platform": plat, "snapshotter": snap,
                                "files": {p: describe(root, p) for p in paths},
                                "lists": {d: listing(root, d) for d in dirs},
                                "unreadable": unreadable(root)})
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="pull a tag with both snapshotters and report what each platform shows")
    c.add_argument("--registry", required=True, help="HOST:PORT of a plain-HTTP registry")
    c.add_argument("--repository", default="gpustack/runner")
    c.add_argument("--tag", required=True)
    c.add_argument("--path", action="append", default=[], help="an absolute path to describe (repeatable)")
    c.add_argument("--list", action="append", default=[], help="a directory whose names to list (repeatable)")
    a = p.parse_args(argv)
    for row in check(a.registry, a.repository, a.tag, a.path, dirs=a.list):
        print(json.dumps(row, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
