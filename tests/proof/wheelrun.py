"""runner-patch's commands as the wheels proof runs them (`apply`, `plan`, `verify`, `rollback`,
the options as for every other kind), and what the registry holds (skopeo's digests, the
storage's files), to show what a run pushed. A binary without the `wheels` kind fails every
test that applies one, with its own error line in the message.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.proof import proofutil as pu
from tests.proof.pylock import BACKEND

TAG = "cuda12.8-vllm0.11.2"


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    doc: dict | None

    @property
    def record(self) -> dict:
        """The one image's record of an `apply`/`plan --json` (fails naming the run when absent)."""
        assert self.doc and self.doc.get("images"), f"no image record: {self.describe()}"
        return self.doc["images"][0]

    def describe(self) -> str:
        err = "\n".join(self.stderr.strip().splitlines()[-10:])
        return f"exit {self.code}; stderr:\n{err}\nstdout: {self.stdout[-1500:]}"


def tool(*args: str) -> Run:
    """Runs the binary with a cache of fetched wheels of its own, so a wheel by URL is fetched
    (and checked) by each run rather than found in a cache an earlier test filled."""
    with tempfile.TemporaryDirectory(prefix="rp-cache-") as cache:
        env = dict(os.environ, RUNNER_PATCH_CACHE=cache)
        r = subprocess.run([str(pu.binary()), *args], capture_output=True, text=True, timeout=600,
                           env=env)
    try:
        doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else None
    except ValueError:
        doc = None
    return Run(r.returncode, r.stdout, r.stderr, doc)


def image_args(addr: str, repo: str, tag: str = TAG) -> list[str]:
    return ["--backend", BACKEND, "--repository", f"{addr}/{repo}", "--tag", tag, "--no-cache", "-q"]


def apply(addr: str, repo: str, folder: Path, digest_map: Path, tag: str = TAG, expect: int | None = 0) -> Run:
    """`apply --json` of the patch FOLDER; with EXPECT, fails unless it exits so."""
    run = tool("apply", *image_args(addr, repo, tag), "--patch", str(folder), "--digest-map", str(digest_map), "--json")
    if expect is not None:
        assert run.code == expect, f"runner-patch apply --patch {folder.name} (expected exit {expect}): {run.describe()}"
    return run


def plan(addr: str, repo: str, folder: Path, tag: str = TAG) -> Run:
    return tool("plan", *image_args(addr, repo, tag), "--patch", str(folder), "--json")


def verify(folder: Path, digest_map: Path | None = None, refs=()) -> Run:
    args = ["verify", *refs, "--patch", str(folder), "-q"]
    if digest_map is not None:
        args += ["--digest-map", str(digest_map)]
    return tool(*args)


def rollback(digest_map: Path) -> Run:
    return tool("rollback", "--digest-map", str(digest_map), "-q")


def served(addr: str, repo: str, tag: str = TAG) -> str:
    """The digest of what the registry serves for the tag (skopeo's raw manifest)."""
    import hashlib
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{addr}/{repo}:{tag}"],
                         check=True, capture_output=True).stdout
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def storage(registry_dir: Path) -> list[str]:
    """Every file of the registry's storage (equal lists: nothing was pushed)."""
    return sorted(str(p.relative_to(registry_dir)) for p in (registry_dir / "storage").rglob("*") if p.is_file())
