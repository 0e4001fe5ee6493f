"""The proof world of the runner project's package post operations (the folders of
`examples/post-operations/` with requirement lines or `remove`): stand-in wheels under the
exact names and versions the operations install, upgrade, downgrade or remove, served by the
test index (tests/proof/pyindex.py, PEP 658 metadata), and fixture images per backend holding
what those operations start from.

The real wheels (cuDNN, NCCL, flash-attn: hundreds of MB) are not fetched: each stand-in has the
real name, version, wheel tags (per architecture where the real one is) and the dependencies
that matter to the choice (ray's `client` and `default` extras, librosa and
`mistral_common[audio]`), and a module or library file naming itself, so an import shows which
one the container sees. The fixture's Python is the Python root's CPython 3.11 (the cann
images' own; the cuda and rocm images hold 3.12), so binary stand-ins are cp311.

Installed per backend (above the wheels proof's base and installed layers):
- cuda: ray 2.55.0, nvidia-nccl-cu12 2.28.3, nvidia-cudnn-cu12 9.10.2.21,
  nvidia-cudnn-frontend 1.14.0, runai-model-streamer 0.14.0 (amd64 and arm64);
- rocm: ray 2.55.0, triton 3.4.0 (amd64);
- cann: ray 2.55.0 (amd64 and arm64).
"""
from __future__ import annotations

from pathlib import Path

from imagekit.layer import Layer
from imagekit.wheel import Wheel
from tests.proof import wheelimg

TRIPLE = {"amd64": "x86_64", "arm64": "aarch64"}
FLASH = "flash_attn-2.8.3+cu12torch2.8cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
# Where the flash-attn folder's URL points; the test serves the same file name from the index.
FLASH_RELEASE = "https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/"

ENV_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The Env variables the operations' lines read, as the runner images carry them.
ENV = {
    "cuda-vllm": [ENV_PATH, "CUDA_VERSION=12.8", "PYTHON_VERSION=3.11", "VLLM_VERSION=0.14.1",
                  "VLLM_TORCH_VERSION=2.9.0", "VLLM_TORCH_CUDA_VERSION=12.8"],
    "cuda-sglang": [ENV_PATH, "CUDA_VERSION=12.8", "PYTHON_VERSION=3.11", "SGLANG_VERSION=0.5.8",
                    "SGLANG_TORCH_VERSION=2.8.0", "SGLANG_TORCH_CUDA_VERSION=12.8"],
    "rocm-vllm": [ENV_PATH, "ROCM_VERSION=6.4", "PYTHON_VERSION=3.11", "VLLM_VERSION=0.14.1"],
    "rocm-sglang": [ENV_PATH, "ROCM_VERSION=6.4", "PYTHON_VERSION=3.11", "SGLANG_VERSION=0.5.8"],
    "cann-vllm": [ENV_PATH, "CANN_VERSION=8.3", "PYTHON_VERSION=3.11", "VLLM_VERSION=0.11.0"],
    "cann-mindie": [ENV_PATH, "CANN_VERSION=8.3", "PYTHON_VERSION=3.11", "MINDIE_VERSION=2.2.rc1"],
}
ARCHES = {"cuda": ("amd64", "arm64"), "rocm": ("amd64",), "cann": ("amd64", "arm64")}


def _module(name: str, version: str, arch: str | None) -> str:
    where = f' on {TRIPLE[arch]}' if arch else ""
    return f'VERSION = "{version}"\nWHAT = "{name} {version}{where}"\n'


def pure(name: str, version: str, requires=(), extras=None) -> Wheel:
    return Wheel(name, version, requires=list(requires), extras=extras,
                 files={f"{name.replace('-', '_').lower()}/__init__.py": _module(name, version, None)})


def binary(name: str, version: str, arch: str, requires=(), extras=None, module: str | None = None) -> Wheel:
    """A cp311 wheel for ARCH: its module and a stand-in extension named for the architecture."""
    mod = module or name.replace("-", "_").lower()
    t = TRIPLE[arch]
    return Wheel(name, version, tag=f"cp311-cp311-manylinux_2_17_{t}", requires=list(requires), extras=extras,
                 files={f"{mod}/__init__.py": _module(name, version, arch),
                        f"{mod}/_native.cpython-311-{t}-linux-gnu.so": f"\x7fELF {name} {version} {t}\n".encode()})


def nvidia(name: str, version: str, arch: str, lib: str) -> Wheel:
    """An NVIDIA library wheel as they ship (`py3-none-manylinux_*`, no Python ABI): a shared
    `nvidia/__init__.py` and the library under `nvidia/<lib>/lib/`."""
    t = TRIPLE[arch]
    return Wheel(name, version, tag=f"py3-none-manylinux_2_17_{t}",
                 files={"nvidia/__init__.py": "",
                        f"nvidia/{lib}/__init__.py": _module(name, version, arch),
                        f"nvidia/{lib}/lib/lib{lib}.so": f"\x7fELF {name} {version} {t}\n".encode()})


def ray(version: str, arch: str) -> Wheel:
    return binary("ray", version, arch, extras={"client": ["grpcio>=1.42.0"],
                                                "default": ["aiohttp>=3.7", "prometheus-client>=0.7.1"]})


def installed(backend: str, arch: str) -> list[Wheel]:
    """What the fixture image of BACKEND has installed for ARCH (the module's doc)."""
    if backend == "cuda":
        return [ray("2.55.0", arch), nvidia("nvidia-nccl-cu12", "2.28.3", arch, "nccl"),
                nvidia("nvidia-cudnn-cu12", "9.10.2.21", arch, "cudnn"),
                binary("nvidia-cudnn-frontend", "1.14.0", arch, module="cudnn"),
                pure("runai-model-streamer", "0.14.0")]
    if backend == "rocm":
        return [ray("2.55.0", arch), binary("triton", "3.4.0", arch)]
    return [ray("2.55.0", arch)]


def flash_attn() -> Wheel:
    return Wheel("flash-attn", "2.8.3+cu12torch2.8cxx11abiFALSE", tag="cp311-cp311-linux_x86_64",
                 files={"flash_attn/__init__.py": _module("flash-attn", "2.8.3", "amd64"),
                        "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so": b"\x7fELF flash-attn 2.8.3 x86_64\n"})


def served() -> list[Wheel]:
    """Every wheel of the index: what is installed and what the operations ask for."""
    out: list[Wheel] = [pure("prometheus-client", "0.21.0"), pure("soundfile", "0.13.1"),
                        pure("librosa", "0.11.0", requires=["soundfile>=0.12.1"]),
                        pure("mistral_common", "1.8.0", extras={"audio": ["soundfile>=0.12.1", "soxr>=0.5.0"]}),
                        binary("triton", "3.5.1", "amd64"), binary("petit-kernel", "0.0.2", "amd64"), flash_attn()]
    for arch in ("amd64", "arm64"):
        out += [*installed("cuda", arch)[1:], ray("2.55.0", arch), ray("2.54.0", arch), ray("2.48.0", arch),
                binary("grpcio", "1.66.0", arch), binary("aiohttp", "3.10.0", arch),
                nvidia("nvidia-nccl-cu12", "2.27.5", arch, "nccl"),
                nvidia("nvidia-cudnn-cu12", "9.16.0.29", arch, "cudnn"),
                binary("nvidia-cudnn-frontend", "1.17.0", arch, module="cudnn"),
                binary("nvshmem4py-cu12", "0.1.2", arch, module="nvshmem"),
                binary("triton-ascend", "3.2.0", arch, module="triton"),
                binary("posix_ipc", "1.2.0", arch), binary("av", "16.0.1", arch), binary("soxr", "0.5.0", arch)]
    out.append(binary("triton", "3.4.0", "amd64"))
    return out


def write(directory: Path) -> list[Path]:
    seen: dict[str, Path] = {}
    for w in served():
        seen.setdefault(w.filename, w.write(directory))
    return list(seen.values())


def installed_layer(world, backend: str, arch: str, work: Path) -> Layer:
    """The layer of `installed(BACKEND, ARCH)` as pip installs it above the wheels proof's
    installed layer (wheelimg.pip_layer)."""
    wheels = [w.write(work / "w") for w in installed(backend, arch)]
    reqs = [f"{w.name}=={w.version}" for w in installed(backend, arch)]
    return wheelimg.pip_layer(world.work / "installed", arch, wheels, reqs, work)
