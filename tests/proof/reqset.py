"""The requirements route's proof world: the wheels its index serves, and the fixture image uv
resolves against (the wheels proof's Python root and pip-installed distributions, one more layer
of what the route's cases start from, and an Env as the runner images carry).

Served by the index (besides every wheel the fixture image has installed):
- a new dependency tree with a launcher: tree-top 1.0 (console script `tree-top`) needs
  tree-mid>=1.0, which needs tree-leaf>=1.5 (1.0 and 2.0 served: uv takes 2.0);
- an extra on an installed package: extra-host 1.0 (installed) provides `fancy`, which needs
  fancy-lib>=1.0 (1.0 and 1.1 served);
- a binary package to upgrade: fastext 1.0 (installed, per architecture) and 1.1, cp311 for
  x86_64 and aarch64, and a cp312 x86_64 1.1 that no image here may take;
- a `${CUDA_VERSION%%.*}` line: cuda-shim-cu12 1.0 and cuda-shim-cu13 1.0 (the image's
  CUDA_VERSION is 12.8);
- an sdist-only release: sdist-only 1.0 (`.tar.gz`, no wheel).
"""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

from imagekit.layer import Layer
from imagekit.wheel import Wheel
from tests.proof import wheelimg, wheelset

ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "CUDA_VERSION=12.8",
       "VLLM_TORCH_CUDA_VERSION=12.8", "RAY_VERSION=2.54.0"]
# What the requirements layer installs on top of the wheels proof's INSTALLED.
PRESENT = [("extra-host", "1.0"), ("fastext", "1.0")]


def _module(name: str, version: str) -> str:
    return f'VERSION = "{version}"\n\n\ndef main():\n    print("{name} {version}")\n    return 0\n'


def tree() -> list[Wheel]:
    return [Wheel("tree-top", "1.0", requires=["tree-mid>=1.0"], console_scripts={"tree-top": "tree_top:main"},
                  files={"tree_top/__init__.py": _module("tree-top", "1.0")}),
            Wheel("tree-mid", "1.0", requires=["tree-leaf>=1.5"], files={"tree_mid/__init__.py": _module("tree-mid", "1.0")}),
            *(Wheel("tree-leaf", v, files={"tree_leaf/__init__.py": _module("tree-leaf", v)}) for v in ("1.0", "2.0"))]


def extra_host() -> Wheel:
    return Wheel("extra-host", "1.0", extras={"fancy": ["fancy-lib>=1.0"]},
                 files={"extra_host/__init__.py": _module("extra-host", "1.0")})


def fancy_lib(version: str) -> Wheel:
    return Wheel("fancy-lib", version, files={"fancy_lib/__init__.py": _module("fancy-lib", version)})


def fastext(arch: str, version: str, python: str = "cp311") -> Wheel:
    """wheelset.fastext at VERSION (the extension stand-in's bytes name both)."""
    w = wheelset.fastext(arch, python)
    if version == "1.0":
        return w
    triple = wheelset.ARCH_TAG[arch]
    files = {p: (v.replace(b"1.0", version.encode()) if isinstance(v, bytes) else v) for p, v in w.files.items()}
    files["fastext/__init__.py"] += f'VERSION = "{version}"\n'
    return Wheel("fastext", version, tag=f"{python}-{python}-manylinux_2_17_{triple}", files=files)


def cuda_shim(major: str) -> Wheel:
    return Wheel(f"cuda-shim-cu{major}", "1.0", files={f"cuda_shim_cu{major}/__init__.py": f'CUDA_MAJOR = "{major}"\n'})


def sdist(name: str, version: str, directory: Path) -> Path:
    """A source distribution (PKG-INFO and a setup.py), the only file of NAME VERSION."""
    base = f"{name.replace('-', '_')}-{version}"
    members = {f"{base}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode(),
               f"{base}/setup.py": f"from setuptools import setup\nsetup(name={name!r}, version={version!r})\n".encode()}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        for path, data in sorted(members.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mtime, info.mode = len(data), 1577836800, 0o644
            tf.addfile(info, io.BytesIO(data))
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"{base}.tar.gz"
    out.write_bytes(buf.getvalue())
    return out


def served() -> list[Wheel]:
    """Every wheel of the index."""
    return [*wheelset.installed_wheels(), *tree(), extra_host(), fancy_lib("1.0"), fancy_lib("1.1"),
            *(fastext(a, v) for a in ("amd64", "arm64") for v in ("1.0", "1.1")), fastext("amd64", "1.1", "cp312"),
            cuda_shim("12"), cuda_shim("13")]


def write(directory: Path) -> list[Path]:
    """The index's files in DIRECTORY: every wheel of `served` and the sdist."""
    return [w.write(directory) for w in served()] + [sdist("sdist-only", "1.0", directory)]


def present_layer(world, arch: str, work: Path) -> Layer:
    """The layer of PRESENT as pip installs it above the wheels proof's installed layer."""
    wheels = [extra_host().write(work / "w"), fastext(arch, "1.0").write(work / "w")]
    return wheelimg.pip_layer(world.work / "installed", arch, wheels, [f"{n}=={v}" for n, v in PRESENT], work)
