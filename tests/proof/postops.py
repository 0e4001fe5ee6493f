"""Fixture images shaped like the targets of the runner project's post operations, and the
runs and outside tools that judge what runner-patch makes of them (skopeo, umoci, GNU patch,
sed, jq, containerd through tests.support.containerd).

The operations' own files (diffs, scripts, lists) are the runner project's and are not kept in
this repository: each test writes a stand-in of the same shape into a copy of the example
folder, under the name its patch.toml gives. A diff is GNU diff's answer on a stand-in module
(`module`, `gnu_diff`), so GNU `patch -p1 --fuzz=0` and runner-patch apply it to the same bytes;
the real release files are not downloaded.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from imagekit.image import push
from imagekit.layer import Layer
from imagekit.media import AMD64, ARM64
from imagekit.registry import Client
from tests.proof import proofutil as pu
from tests.support.containerd import SNAPSHOTTERS, describe, platform_configs, unreadable

EXAMPLES = pu.REPO_ROOT / "examples" / "post-operations"
SITE312 = "usr/local/lib/python3.12/dist-packages"
SITE311 = "usr/local/python3.11.13/lib/python3.11/site-packages"
PLATFORMS = {"docker": (AMD64, ARM64), "oci": (AMD64, ARM64), "single": (AMD64,)}
ARCH = {"linux/amd64": "amd64", "linux/arm64/v8": "arm64"}


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --- stand-ins for the operations' files ------------------------------------------------------

def module(parts) -> tuple[bytes, bytes]:
    """The original and the changed text of a stand-in module: PARTS in order, each a number of
    filler lines (`# filler N`, numbered so no two lines of context are alike), text common to
    both, or an (old, new) pair of texts for where the two differ."""
    old, new, n = [], [], 0
    for part in parts:
        if isinstance(part, int):
            for _ in range(part):
                n += 1
                old.append(f"# filler {n}\n")
                new.append(f"# filler {n}\n")
        elif isinstance(part, str):
            old.append(part)
            new.append(part)
        else:
            old.append(part[0])
            new.append(part[1])
    return "".join(old).encode(), "".join(new).encode()


def git_blob(data: bytes) -> str:
    """The blob name git gives DATA (for a diff's `index` line)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def gnu_diff(old: bytes, new: bytes, rel: str, headings: str | None = None, index: bool = True) -> str:
    """GNU `diff -u` of OLD and NEW as file REL with `a/` and `b/` labels under a `diff --git`
    line (and an `index` line if INDEX), as `git diff` writes the operations' diffs; HEADINGS is
    a `diff -F` regular expression for the text after each `@@`."""
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a", Path(tmp) / "b"
        a.write_bytes(old)
        b.write_bytes(new)
        cmd = ["diff", "-u", "--label", f"a/{rel}", "--label", f"b/{rel}"]
        if headings:
            cmd += ["-F", headings]
        r = subprocess.run([*cmd, str(a), str(b)], capture_output=True, text=True)
    assert r.returncode == 1, f"diff: exit {r.returncode} (1 means the files differ): {r.stderr}"
    head = f"diff --git a/{rel} b/{rel}\n"
    if index:
        head += f"index {git_blob(old)[:9]}..{git_blob(new)[:9]} 100644\n"
    return head + r.stdout


# --- images ---------------------------------------------------------------------------------

def python_layer(minor: int, prefix: str = "usr") -> Layer:
    """The interpreter, as a base image has it."""
    return (Layer(f"python 3.{minor}")
            .file(f"{prefix}/bin/python3.{minor}", b"\x7fELF python", 0o755)
            .file(f"{prefix}/lib/python3.{minor}/os.py", b"# os\n"))


def push_image(addr: str, repo: str, tag: str, layers, style: str, env=None) -> dict:
    """Pushes LAYERS (a function of the platform returning its Layer list) for every platform
    of STYLE (`docker` list, `oci` index, `single`); returns imagekit.image.push's answer."""
    client = Client(addr, repo)
    try:
        kwargs = {"env": env} if env is not None else {}
        return push(client, tag, {p: layers(p) for p in PLATFORMS[style]}, style=style, **kwargs)
    finally:
        client.close()


# --- runner-patch and the outside tools -------------------------------------------------------

def tool(*args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    r = subprocess.run([str(pu.binary()), *args], capture_output=True, text=True, timeout=300)
    if check is not None:
        assert r.returncode == check, f"runner-patch {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def apply(addr: str, repo: str, tag: str, backend: str, patches, digest_map: Path,
          check: int | None = 0) -> dict:
    args = ["apply", "--backend", backend, "--repository", f"{addr}/{repo}", "--tag", tag,
            "--digest-map", str(digest_map), "--json", "--no-cache", "-q"]
    for p in patches:
        args += ["--patch", str(p)]
    return json.loads(tool(*args, check=check).stdout)["images"][0]


def verify(digest_map: Path, patches) -> None:
    args = ["verify", "--digest-map", str(digest_map), "-q"]
    for p in patches:
        args += ["--patch", str(p)]
    tool(*args)


def rollback(digest_map: Path) -> None:
    tool("rollback", "--digest-map", str(digest_map), "-q")


def served(addr: str, repo: str, tag: str) -> str:
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                          f"docker://{addr}/{repo}:{tag}"], check=True, capture_output=True).stdout
    return sha(raw)


def config_of(addr: str, repo: str, tag: str, platform: str) -> dict:
    """The image config of one platform, as skopeo reads it."""
    arch = ARCH[platform]
    variant = ["--override-variant", "v8"] if arch == "arm64" else []
    raw = run(["skopeo", "inspect", "--config", "--raw", "--tls-verify=false", "--override-os", "linux",
               "--override-arch", arch, *variant, f"docker://{addr}/{repo}:{tag}"]).stdout
    return json.loads(raw)


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    """An outside tool, which must succeed (its stderr in the failure)."""
    r = subprocess.run(cmd, capture_output=True)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.decode(errors='replace')}"
    return r


def umoci_rootfs(addr: str, repo: str, tag: str, platform: str, into: Path) -> Path:
    """One platform unpacked by umoci (which checks every diff_id) after a skopeo copy."""
    arch = ARCH[platform]
    into.mkdir(parents=True, exist_ok=True)
    layout, bundle = into / f"layout-{arch}", into / f"bundle-{arch}"
    variant = ["--override-variant", "v8"] if arch == "arm64" else []
    run(["skopeo", "copy", "-q", "--src-tls-verify=false", "--override-os", "linux",
         "--override-arch", arch, *variant, f"docker://{addr}/{repo}:{tag}", f"oci:{layout}:t"])
    run(["umoci", "unpack", "--rootless", "--image", f"{layout}:t", str(bundle)])
    return bundle / "rootfs"


def gnu_patch(root: Path, diff: Path) -> None:
    """GNU `patch -p1 --fuzz=0` run in ROOT, as the operations ran it."""
    r = subprocess.run(["patch", "-p1", "--fuzz=0", "--batch", "--no-backup-if-mismatch", "-d", str(root),
                        "-i", str(diff)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def copy_example(name: str, dest: Path) -> Path:
    shutil.copytree(EXAMPLES / name, dest)
    return dest


# --- the judges ------------------------------------------------------------------------------

def judge(ctd, addr: str, repo: str, tag: str, expect: dict[str, dict | None],
          unreadable_ok: dict[str, list[str]] | None = None, tmp: Path | None = None) -> None:
    """Every platform of the tag, unpacked by containerd with each snapshotter and by umoci,
    shows at each path of EXPECT the file described ({"sha256", "mode"} and optionally "uid",
    "gid"; None: nothing there), and lists unreadable entries exactly as UNREADABLE_OK says per
    snapshotter (none by default)."""
    platforms = sorted(platform_configs(addr, repo, tag))
    ref = f"{addr}/{repo}:{tag}"
    allowed = unreadable_ok or {}
    for snap in SNAPSHOTTERS:
        ctd.pull(ref, snap, platforms)
        for plat in platforms:
            with ctd.rootfs(addr, repo, tag, plat, snap) as root:
                for path, want in expect.items():
                    got = describe(root, path)
                    assert_file(got, want, f"containerd {snap} {plat} {path}")
                assert unreadable(root) == sorted(allowed.get(snap, [])), f"containerd {snap} {plat}"
    if tmp is not None:
        for plat in platforms:
            root = umoci_rootfs(addr, repo, tag, plat, tmp / f"umoci-{tag}-{ARCH[plat]}")
            for path, want in expect.items():
                assert_file(describe(str(root), path), want, f"umoci {plat} {path}")


def assert_file(got: dict | None, want: dict | None, where: str) -> None:
    if want is None:
        assert got is None, f"{where}: expected nothing, found {got}"
        return
    assert got is not None, f"{where}: no such file"
    for k, v in want.items():
        assert got[k] == v, f"{where}: {k} is {got[k]!r}, expected {v!r}"
