"""A root filesystem holding a working CPython 3.11 and pip, made from Debian bookworm's own
packages, for the wheels proof: pip itself, run in a chroot of an unpacked image, is the judge
of what `runner-patch apply` installs.

The packages are fetched with `apt-get download` through a private apt state (its own lists and
archive cache under the cache directory, so the machine's apt configuration is left alone) and
each is unpacked with `dpkg-deb -x`; the root is then laid out as Debian's images are: merged
`/usr` (`/bin`, `/sbin`, `/lib`, `/lib64` are links into `/usr`), a dpkg status file listing the
packages (where the image's glibc version can be read), `/tmp` 1777, an ld.so cache. One root per
architecture (amd64 runs here; arm64 is only read), built once per machine under
`${RUNNER_PATCH_CACHE:-$HOME/.cache/runner-patch}/pyroot/<arch>-<key>/root` (the key: a hash of the
package list and the sources) and reused.

    python3 -m tests.proof.pyroot build [amd64|arm64 ...]   # prints each root
    python3 -m tests.proof.pyroot check                     # chroot ROOT python3 -m pip --version

Needs root (chroot, and files owned by root), `apt-get`, `dpkg-deb`, network to Debian's mirror.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# What `python3 -m pip install` needs, and nothing else: the interpreter and its standard
# library, pip with the Debian dependencies it imports, and the shared libraries they load.
PACKAGES = [
    "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "python3-minimal",
    "python3-pip", "python3-setuptools", "python3-pkg-resources", "python3-wheel",
    "python3-distutils", "python3-lib2to3",
    "libc6", "libssl3", "libexpat1", "zlib1g", "libffi8", "libbz2-1.0", "liblzma5", "libcrypt1",
    "libuuid1", "libsqlite3-0", "media-types",
]
SOURCES = [
    "http://deb.debian.org/debian bookworm main",
    "http://deb.debian.org/debian bookworm-updates main",
    "http://deb.debian.org/debian-security bookworm-security main",
]
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
ARCHES = ("amd64", "arm64")
TRIPLET = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
PYTHON = "/usr/bin/python3"
SITE = "usr/local/lib/python3.11/dist-packages"  # where pip installs, as Debian's Python lays it out
DIST_SITE = "usr/lib/python3/dist-packages"       # Debian's own packages (pip lives here)
MARKER = ".pyroot.json"


class PyrootError(RuntimeError):
    pass


def cache_base() -> Path:
    base = os.environ.get("RUNNER_PATCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "runner-patch")
    return Path(base) / "pyroot"


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise PyrootError(f"{' '.join(cmd)}: exit {r.returncode}: {(r.stderr or r.stdout)[-2000:]}")
    return r


def _apt(state: Path, arch: str, *args: str) -> subprocess.CompletedProcess:
    """apt-get with a private state (sources, lists, archive cache) for ARCH only."""
    opts = [f"-o=Dir::State::Lists={state}/lists", f"-o=Dir::Cache={state}/cache",
            f"-o=Dir::Etc::SourceList={state}/sources.list", "-o=Dir::Etc::SourceParts=/dev/null",
            f"-o=APT::Architectures::={arch}", f"-o=APT::Architecture={arch}", "-q"]
    return _run(["apt-get", *opts, *args], cwd=state / "debs", timeout=900)


def download(arch: str, state: Path) -> list[Path]:
    """The .deb files of PACKAGES for ARCH (apt's candidate versions), in STATE/debs."""
    for d in ("lists/partial", "cache/archives/partial", "debs"):
        (state / d).mkdir(parents=True, exist_ok=True)
    (state / "sources.list").write_text(
        "".join(f"deb [arch={arch} signed-by={KEYRING}] {s}\n" for s in SOURCES))
    _apt(state, arch, "update")
    for old in (state / "debs").glob("*.deb"):
        old.unlink()
    _apt(state, arch, "download", *PACKAGES)
    debs = sorted((state / "debs").glob("*.deb"))
    if len(debs) != len(PACKAGES):
        raise PyrootError(f"apt-get download gave {len(debs)} packages for {arch}, expected {len(PACKAGES)}")
    return debs


def _merge_usr(root: Path) -> None:
    """/bin, /sbin, /lib, /lib64 moved into /usr and replaced by relative links, as Debian's
    merged-/usr images have them."""
    for d in ("bin", "sbin", "lib", "lib64"):
        top = root / d
        if top.is_symlink() or not top.exists():
            continue
        dest = root / "usr" / d
        dest.mkdir(parents=True, exist_ok=True)
        for src in sorted(top.rglob("*")):
            rel = src.relative_to(top)
            to = dest / rel
            if src.is_dir() and not src.is_symlink():
                to.mkdir(exist_ok=True)
            elif not to.exists() and not to.is_symlink():
                os.rename(src, to)
        shutil.rmtree(top)
        top.symlink_to(f"usr/{d}")


def _status(debs: list[Path]) -> str:
    """/var/lib/dpkg/status for the unpacked packages (their control fields, installed)."""
    entries = []
    for deb in debs:
        control = _run(["dpkg-deb", "-f", str(deb)]).stdout.rstrip("\n").split("\n")
        out = []
        for line in control:
            out.append(line)
            if line.startswith("Package:"):
                out.append("Status: install ok installed")
        entries.append("\n".join(out) + "\n")
    return "\n".join(entries)


def assemble(debs: list[Path], root: Path, arch: str) -> None:
    for deb in debs:
        _run(["dpkg-deb", "-x", str(deb), str(root)])
    _merge_usr(root)
    (root / "var/lib/dpkg").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").write_text(_status(debs))
    for d, mode in (("tmp", 0o1777), ("root", 0o700), ("etc", 0o755), (SITE, 0o755)):
        (root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(root / d, mode)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    if arch == "amd64":
        _run(["ldconfig", "-r", str(root)])


def build(arch: str = "amd64") -> Path:
    """The root for ARCH, built now unless the cache holds a finished one."""
    if arch not in ARCHES:
        raise PyrootError(f"unknown architecture {arch!r} (one of {', '.join(ARCHES)})")
    if os.geteuid() != 0:
        raise PyrootError("building the Python root needs root (files owned by root, chroot)")
    key = hashlib.sha256("\n".join(PACKAGES + SOURCES).encode()).hexdigest()[:12]
    base = cache_base() / f"{arch}-{key}"  # another package list is another root
    base.mkdir(parents=True, exist_ok=True)
    root = base / "root"
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / MARKER).is_file():
            return root
        debs = download(arch, base / "apt")
        tmp = Path(tempfile.mkdtemp(prefix="root.", dir=base))
        try:
            assemble(debs, tmp, arch)
            (tmp / MARKER).write_text(json.dumps({"arch": arch, "debs": [d.name for d in debs]}, indent=1))
            if arch == "amd64":
                check(tmp)
            if root.exists():
                shutil.rmtree(root)
            os.rename(tmp, root)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return root


def env() -> dict[str, str]:
    """The environment of a command in the chroot: no bytecode written, no pip cache, no
    version check, a clean PATH."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_ROOT_USER_ACTION": "ignore"}


def chroot(root: Path, *cmd: str, check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
    """CMD run in a chroot of ROOT with `env()`; with CHECK, a failure is an error naming it."""
    r = subprocess.run([shutil.which("chroot") or "/usr/sbin/chroot", str(root), *cmd], capture_output=True, text=True, env=env(),
                       timeout=timeout)
    if check and r.returncode != 0:
        raise PyrootError(f"chroot {root} {' '.join(cmd)}: exit {r.returncode}: {(r.stderr or r.stdout)[-3000:]}")
    return r


def pip(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`python3 -m pip ARGS` of the root's own Python, in a chroot (Debian marks its Python
    externally managed; pip is told to go ahead, as a Dockerfile's `RUN pip install` is)."""
    extra = ["--break-system-packages"] if args and args[0] in ("install", "uninstall") else []
    return chroot(root, PYTHON, "-m", "pip", *args, *extra, check=check)


def check(root: Path) -> str:
    """`pip --version` in a chroot of ROOT; an error unless it names pip from Debian's tree."""
    out = chroot(root, PYTHON, "-m", "pip", "--version").stdout.strip()
    if "/usr/lib/python3/dist-packages/pip" not in out or "python 3.11" not in out:
        raise PyrootError(f"pip in {root} answered {out!r}")
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("build", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "check":
        print(check(build("amd64")))
        return 0
    for arch in argv[1:] or ["amd64"]:
        print(build(arch))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
