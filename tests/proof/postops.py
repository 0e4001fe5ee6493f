"""Fixture images shaped like the targets of the runner project's post operations, and the
runs and outside tools that judge what runner-patch makes of them (skopeo, umoci, GNU patch,
sed, jq, containerd through tests.support.containerd).

A file a diff changes is built from the diff itself (`shaped_like`): the lines the diff
expects at the line numbers it names, filler lines between, so GNU `patch -p1 --fuzz=0` and
runner-patch both apply it to the same bytes; the real release files are not downloaded.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
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


# --- files shaped like the targets --------------------------------------------------------

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def old_lines(diff: str, rel: str) -> list[tuple[int, list[str]]]:
    """(old start line, the old lines) of each hunk of file REL in a unified diff."""
    out, current, in_file, left = [], None, False, 0
    for line in diff.splitlines():
        if line.startswith("--- "):
            in_file = line[4:].split("\t")[0].strip() in (f"a/{rel}", rel)
            continue
        if line.startswith("+++ ") or not in_file:
            continue
        m = HUNK.match(line)
        if m:
            current = (int(m.group(1)), [])
            left = int(m.group(2) or 1)
            out.append(current)
            continue
        if current is None or left == 0:
            continue
        if line.startswith((" ", "-")) or line == "":
            current[1].append(line[1:] if line else "")
            left -= 1
    return out


def shaped_like(diff_file: Path, rel: str, filler: str = "# filler") -> bytes:
    """A file holding the lines DIFF_FILE expects of REL at the lines it names."""
    lines: list[str] = []
    for start, old in old_lines(diff_file.read_text(), rel):
        while len(lines) < start - 1:
            lines.append(f"{filler} {len(lines) + 1}")
        lines.extend(old)
    lines.append(f"{filler} end")
    return ("\n".join(lines) + "\n").encode()


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
