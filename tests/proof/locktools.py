"""The lock writers of the wheels proof, `pip lock` (pip >= 25.1) and `uv pip compile --format
pylock.toml`, in a venv of their own at `${RUNNER_PATCH_CACHE:-$HOME/.cache/runner-patch}/lock-tools`
(the pins: tests/proof/requirements-locks.txt), never in the Python that runs the tests.

    python3 -m tests.proof.locktools install   # creates the venv (PyPI); prints its bin directory

Each writes a pylock.toml from wheels found on a plain-HTTP find-links page (`--no-index`), so
the lock names them by `url` and runner-patch downloads them, as from an index.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.proof import proofutil as pu

REQUIREMENTS = pu.REPO_ROOT / "tests" / "proof" / "requirements-locks.txt"


def venv() -> Path:
    base = os.environ.get("RUNNER_PATCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "runner-patch")
    return Path(base) / "lock-tools"


def tool(name: str) -> Path | None:
    """The venv's `pip` or `uv`, None when the venv is not installed."""
    path = venv() / "bin" / name
    return path if path.is_file() else None


def install() -> Path:
    v = venv()
    if not (v / "bin" / "python").is_file():
        subprocess.run([sys.executable, "-m", "venv", str(v)], check=True)
    subprocess.run([str(v / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "-r", str(REQUIREMENTS)], check=True, env=clean_env())
    return v / "bin"


def clean_env() -> dict[str, str]:
    """The environment without pip's and uv's settings (a machine's find-links, an index), so a
    lock names only what the test offers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["UV_NO_CONFIG"] = "1"
    return env


def pip_lock(find_links: str, requirements: list[str], out: Path) -> str:
    """`pip lock --no-index --find-links FIND_LINKS REQUIREMENTS -o OUT`; its stderr."""
    r = subprocess.run([str(tool("pip")), "lock", "--no-index", "--find-links", find_links, *requirements,
                        "-o", str(out)], capture_output=True, text=True, env=clean_env(), timeout=300)
    assert r.returncode == 0, f"pip lock: {r.stdout}{r.stderr}"
    return r.stderr


def uv_lock(find_links: str, requirements: list[str], out: Path) -> str:
    """`uv pip compile --universal --no-deps --format pylock.toml` of REQUIREMENTS for Python
    3.11 (every platform's wheels) into OUT."""
    req = out.parent / "requirements.in"
    req.write_text("".join(r + "\n" for r in requirements))
    r = subprocess.run([str(tool("uv")), "pip", "compile", "--no-deps", "--no-index", "--find-links", find_links,
                        "--format", "pylock.toml", "--python-version", "3.11", "--universal", "--no-cache",
                        str(req), "-o", str(out)], capture_output=True, text=True, env=clean_env(), timeout=300)
    req.unlink()
    assert r.returncode == 0, f"uv pip compile: {r.stdout}{r.stderr}"
    return r.stderr


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(install())
