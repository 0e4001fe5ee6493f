"""The requirements route (issue 34) against uv itself: a `wheels` patch whose `requirements`
are resolved by uv per image and platform. `plan` names what uv would install, upgrade or keep
on each platform and pushes nothing; `apply` gives each platform what `uv pip install` of the
same lines gives inside that image (uv in a chroot of the unpacked original for amd64, `--target`
for arm64), judged file by file; a re-run is already patched; `verify` passes; `rollback`
restores; refusals end in one line with nothing pushed.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.proof import uvjudge, wheelimg, wheelrun
from tests.proof.pylock import BACKEND
from tests.proof.wheeljudge import compare, pip_check, pip_list

TAG = wheelrun.TAG
LINES = ["tree-top", "extra-host[fancy]", "fastext>=1.1", "cuda-shim-cu${CUDA_VERSION%%.*}==1.0", "demo-pkg>=1.0"]
# The same lines as the image's Env makes them (CUDA_VERSION=12.8), for uv the judge.
EXPANDED = ["tree-top", "extra-host[fancy]", "fastext>=1.1", "cuda-shim-cu12==1.0", "demo-pkg>=1.0"]


def toml_str(s: str) -> str:
    return json.dumps(s)


def folder(dest: Path, pid: str, lines=None, *, file: str | None = None, index_url: str | None = None,
           extra: str = "") -> Path:
    """A requirements patch folder: LINES in patch.toml, or FILE (text) as requirements.txt."""
    dest.mkdir(parents=True, exist_ok=True)
    toml = [f"id = {toml_str(pid)}", 'kind = "wheels"', f"title = {toml_str('requirements ' + pid)}",
            f"backends = [{toml_str(BACKEND)}]"]
    if file is not None:
        (dest / "requirements.txt").write_text(file)
        toml.append('requirements = "requirements.txt"')
    else:
        toml.append("requirements = [" + ", ".join(toml_str(x) for x in lines) + "]")
    if index_url:
        toml.append(f"index-url = {toml_str(index_url)}")
    (dest / "patch.toml").write_text("\n".join(toml) + "\n" + extra)
    return dest


@pytest.fixture(scope="module")
def route(req_world, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("route")
    repo = "proof/requirements-route"
    pushed = req_world.push(repo, TAG)
    return {"tmp": tmp, "repo": repo, "original": pushed["digest"],
            "folder": folder(tmp / "all", "req-all", LINES, index_url=req_world.index.url)}


def platform_text(record: dict, platform: str) -> str:
    (plat,) = [p for p in record["platforms"] if p["platform"].startswith(platform)]
    return json.dumps(plat)


def test_plan_names_what_uv_chose_per_platform_and_pushes_nothing(req_world, route, index):
    world = req_world.wheels_world
    before = wheelrun.storage(world.registry_dir)
    run = wheelrun.plan(world.addr, route["repo"], route["folder"])
    assert run.code == 0, run.describe()
    assert wheelrun.storage(world.registry_dir) == before, "plan pushed something"
    rec = run.record
    assert rec["outcome"] == "patched", run.describe()
    for plat, triple in (("linux/amd64", "x86_64"), ("linux/arm64", "aarch64")):
        text = platform_text(rec, plat)
        for want in ("tree-top 1.0 new (tree_top-1.0-py3-none-any.whl)", "tree-mid 1.0 new",
                     "tree-leaf 2.0 new", "fancy-lib 1.1 new", "cuda-shim-cu12 1.0 new",
                     f"fastext 1.0 -> 1.1 (fastext-1.1-cp311-cp311-manylinux_2_17_{triple}.whl)"):
            assert want in text, f"plan of {plat} does not say {want!r}: {text}"
        assert "demo-pkg" not in text and "extra-host 1.0 ->" not in text, f"{plat}: kept dists named: {text}"
    assert index.requests("file") == [] or all(r.path.endswith(".whl") for r in index.requests("file"))
