#!/usr/bin/env python3
"""Fetch the real upstream KV-connector files of released vLLM wheels into a local cache.

Only `vllm/distributed/kv_transfer/kv_connector/v1/*.py` is kept from each wheel, under
`${RUNNER_PATCH_CACHE:-$HOME/.cache/runner-patch}/vllm/<version>/`, and the wheel is deleted
right after extraction. A version whose done-marker exists is not downloaded again.

    python3 -m tests.proof.releases fetch [VERSION ...]   # prints the cache dir
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

VERSIONS = [
    "0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1",
    "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0",
    "0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0",
    "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0",
    "0.30.0", "0.31.0", "0.32.0", "0.33.0",
]

CONNECTOR_DIR = "vllm/distributed/kv_transfer/kv_connector/v1/"
MULTI_CONNECTOR = CONNECTOR_DIR + "multi_connector.py"
DONE_MARKER = ".done.json"
PARALLEL = 2
# The x86_64 wheel's tag changed from release to release (manylinux1, _2_24, _2_28, _2_31,
# _2_35). pip does not widen an explicit --platform, so offer them all; pip picks what exists.
PLATFORMS = ["manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64"]


def cache_root() -> Path:
    base = os.environ.get("RUNNER_PATCH_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "runner-patch"
    )
    return Path(base) / "vllm"


def version_dir(version: str) -> Path:
    return cache_root() / version


def multi_connector_path(version: str) -> Path:
    return version_dir(version) / MULTI_CONNECTOR


def is_cached(version: str) -> bool:
    return (version_dir(version) / DONE_MARKER).is_file()


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _log(msg: str) -> None:
    print(f"releases: {msg}", file=sys.stderr, flush=True)


def fetch_one(version: str) -> Path:
    """Download one wheel, extract the connector files, delete the wheel, write the marker."""
    dest = version_dir(version)
    if is_cached(version):
        return dest
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"wheel-{version}-", dir=cache_root()) as tmp:
        started = time.monotonic()
        cmd = [
            sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--only-binary=:all:", "--no-cache-dir",
            *(a for tag in PLATFORMS for a in ("--platform", tag)),
            "--python-version", "3.12",
            f"vllm=={version}", "-d", tmp,
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wheels = sorted(Path(tmp).glob("vllm-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"vllm {version}: expected one wheel, got {wheels}")
        wheel = wheels[0]
        size = wheel.stat().st_size
        sha = hashlib.sha256()
        with wheel.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                sha.update(block)
        download_s = time.monotonic() - started

        staging = Path(tmp) / "extract"
        extracted = []
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if (name.startswith(CONNECTOR_DIR) and name.endswith(".py")
                        and "/" not in name[len(CONNECTOR_DIR):]):
                    zf.extract(name, staging)
                    extracted.append(name)
        wheel.unlink()  # ~300 MB: do not keep it a moment longer than needed
        if not extracted:
            raise RuntimeError(f"vllm {version}: no {CONNECTOR_DIR}*.py in {wheel.name}")

        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
        marker = {
            "version": version,
            "wheel": wheel.name,
            "wheel_bytes": size,
            "wheel_sha256": sha.hexdigest(),
            "files": sorted(extracted),
            "has_multi_connector": MULTI_CONNECTOR in extracted,
            "download_seconds": round(download_s, 1),
        }
        (dest / DONE_MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        _log(f"{version}: {wheel.name} {size / 1e6:.0f} MB in {download_s:.1f}s, "
             f"{len(extracted)} files")
    return dest


def fetch(versions: list[str] | None = None) -> Path:
    """Make sure every version is cached (two downloads at a time); return the cache dir."""
    todo = [v for v in (versions or VERSIONS) if not is_cached(v)]
    if todo:
        _log(f"fetching {len(todo)} release(s) into {cache_root()}")
        failed = []
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            futures = {v: pool.submit(fetch_one, v) for v in todo}
            for version, fut in futures.items():
                try:
                    fut.result()
                except Exception as exc:  # keep fetching the others, report at the end
                    _log(f"{version}: FAILED: {exc}")
                    failed.append(version)
        if failed:
            raise RuntimeError(f"could not fetch vllm {' '.join(failed)}")
    return cache_root()


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "fetch":
        print(__doc__.strip(), file=sys.stderr)
        return 2
    wanted = argv[1:] or None
    unknown = [v for v in (wanted or []) if v not in VERSIONS]
    if unknown:
        _log(f"note: not in the tested list: {' '.join(unknown)}")
    print(fetch(wanted))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
