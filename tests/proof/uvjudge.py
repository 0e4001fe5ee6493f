"""uv as the judge of the requirements route: what `uv pip install` of the same lines does to
the same image, run where a maintainer's post operation runs it.

- amd64: `uv pip install --system` in a chroot of the unpacked image (`system`): uv (the pinned
  one of tests/proof/requirements-locks.txt) and the one library it needs that the image lacks
  are copied under `/.uv-judge`, `/proc` is mounted and `/dev` gets the nodes uv opens; all of it
  is gone again when uv returns, so the tree holds only what uv installed.
- arm64 (not runnable here): `uv pip install --target <the image's site directory>
  --python-platform aarch64-manylinux_2_36 --python-version 3.11` (`target`), which treats the
  distributions already there as installed, as `--system` would inside the container.

uv's settings from this machine never apply (`UV_NO_CONFIG`, no `UV_*` variables), and it never
downloads a Python. The tree comparison is wheeljudge.compare with judge="uv".
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.proof import locktools, pyroot

JUDGE_DIR = ".uv-judge"
DEV_NODES = {"null": (1, 3), "zero": (1, 5), "random": (1, 8), "urandom": (1, 9)}
ARM64_PLATFORM = "aarch64-manylinux_2_36"


def uv() -> Path:
    path = locktools.tool("uv")
    assert path, "uv is not installed: run `python3 -m tests.proof.locktools install` (.ci/run does)"
    return path


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in locktools.clean_env().items() if not k.startswith("UV_")}
    env.update({"UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never", **extra})
    return env


def _libgcc() -> Path:
    """The host's libgcc_s (uv links it; the Python roots do not carry it)."""
    out = subprocess.run(["ldd", str(uv())], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "libgcc_s" in line and "=>" in line:
            return Path(line.split("=>")[1].split()[0])
    raise AssertionError(f"uv links no libgcc_s: {out}")


@contextlib.contextmanager
def runnable(root: Path):
    """uv, /proc and /dev nodes in ROOT for the duration; ROOT as it was afterwards."""
    made: list[Path] = []
    judge = root / JUDGE_DIR
    (judge / "lib").mkdir(parents=True)
    (judge / "tmp").mkdir()  # uv's lock files, gone with the judge
    shutil.copy2(uv(), judge / "uv")
    shutil.copy2(_libgcc(), judge / "lib" / "libgcc_s.so.1")
    proc, dev = root / "proc", root / "dev"
    for d in (proc, dev):
        if not d.exists():
            d.mkdir()
            made.append(d)
    subprocess.run(["mount", "-t", "proc", "proc", str(proc)], check=True)
    nodes = []
    try:
        for name, (major, minor) in DEV_NODES.items():
            node = dev / name
            if not node.exists():
                os.mknod(node, 0o20666, os.makedev(major, minor))
                nodes.append(node)
        yield judge
    finally:
        subprocess.run(["umount", str(proc)], check=False)
        for node in nodes:
            node.unlink()
        shutil.rmtree(judge)
        for d in reversed(made):
            d.rmdir()


def system(root: Path, requirements: list[str], index_url: str, *args: str,
           check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """`uv pip install --system -r requirements.txt` (REQUIREMENTS, one a line) against INDEX_URL
    in a chroot of ROOT; ARGS are more of uv's options."""
    with runnable(root) as judge:
        (judge / "requirements.txt").write_text("".join(r + "\n" for r in requirements))
        cmd = [shutil.which("chroot") or "/usr/sbin/chroot", str(root), f"/{JUDGE_DIR}/uv", "pip", "install",
               "--system", "--python", pyroot.PYTHON, "--break-system-packages", "--no-python-downloads",
               "--no-cache", "--index-url", index_url, *args, "-r", f"/{JUDGE_DIR}/requirements.txt"]
        env = {**pyroot.env(), "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never",
               "LD_LIBRARY_PATH": f"/{JUDGE_DIR}/lib", "TMPDIR": f"/{JUDGE_DIR}/tmp"}
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if check:
        assert r.returncode == 0, f"uv pip install --system {' '.join(requirements)}: {r.stdout}\n{r.stderr}"
    return r


def target(site: Path, requirements: list[str], index_url: str, *args: str, platform: str = ARM64_PLATFORM,
           python_version: str = "3.11", check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """`uv pip install --target SITE --python-platform PLATFORM` of REQUIREMENTS against INDEX_URL,
    run here: the judge for a platform this machine cannot run."""
    req = site.parent / f"{site.name}.requirements.txt"
    req.write_text("".join(r + "\n" for r in requirements))
    try:
        cmd = [str(uv()), "pip", "install", "--target", str(site), "--python-platform", platform,
               "--python-version", python_version, "--no-python-downloads", "--no-cache",
               "--index-url", index_url, *args, "-r", str(req)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=timeout)
    finally:
        req.unlink()
    if check:
        assert r.returncode == 0, f"uv pip install --target {' '.join(requirements)}: {r.stdout}\n{r.stderr}"
    return r
