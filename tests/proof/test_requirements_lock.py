"""A reviewable lock (issue 35): `runner-patch lock` writes, for every selected image and
platform, uv's PEP 751 lock of what it would install there, one file per distinct environment
with a `[tool.runner-patch]` table naming the environment and the images; `plan --locked` /
`apply --locked` use only those files. Shown here: the locks read as PEP 751 by packaging's own
reader; `apply --locked` while the index's resolution pages and metadata answer 503 gives the
same layers as a fresh resolution and asks the index for no page; a folder without a lock, and a
lock made for another environment, are refused naming the platform and the file, nothing
pushed; without `--locked` a matching lock is used and `plan` says so; through an index behind
Basic credentials, the locks and every output hold no token.
"""
from __future__ import annotations

import base64
import shutil
import tomllib

import pytest
from packaging.pylock import Pylock

from tests.proof import pyindex, wheelrun
from tests.proof.test_requirements_refusals import refused as refused_in
from tests.proof.test_requirements_route import LINES, folder

TAG = wheelrun.TAG


def lock(world, repo: str, f, *extra: str) -> wheelrun.Run:
    return wheelrun.tool("lock", *wheelrun.image_args(world.addr, repo, TAG), *extra, "--patch", str(f))


def apply_locked(world, repo: str, f, dmap, *extra: str) -> wheelrun.Run:
    return wheelrun.tool("apply", *wheelrun.image_args(world.addr, repo, TAG), "--locked", *extra,
                         "--patch", str(f), "--digest-map", str(dmap), "--json")


@pytest.fixture(scope="module")
def locked(req_world, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lock")
    world = req_world.wheels_world
    repo = "proof/requirements-lock"
    original = req_world.push(repo, TAG)["digest"]
    f = folder(tmp / "f", "req-lock", LINES, index_url=req_world.index.url)
    before = wheelrun.storage(world.registry_dir)
    run = lock(world, repo, f)
    assert run.code == 0, run.describe()
    assert wheelrun.storage(world.registry_dir) == before, "lock pushed something"
    return {"tmp": tmp, "repo": repo, "original": original, "folder": f, "run": run}


def test_lock_writes_one_pep751_file_per_environment(req_world, locked):
    f, run = locked["folder"], locked["run"]
    files = sorted(p.name for p in f.glob("pylock*.toml"))
    assert files == ["pylock.aarch64-py311.toml", "pylock.x86-64-py311.toml"], files
    for name, arch, platform in (("pylock.x86-64-py311.toml", "x86_64", "linux/amd64"),
                                 ("pylock.aarch64-py311.toml", "aarch64", "linux/arm64")):
        text = (f / name).read_text()
        doc = tomllib.loads(text)
        lock = Pylock.from_dict(doc)  # packaging's PEP 751 reader validates it
        names = {p.name for p in lock.packages}
        assert names == {"tree-top", "tree-mid", "tree-leaf", "fancy-lib", "cuda-shim-cu12", "fastext"}, names
        for p in lock.packages:
            for w in p.wheels:
                assert w.url and w.hashes["sha256"], p
        (fastext,) = [p for p in lock.packages if p.name == "fastext"]
        assert str(fastext.version) == "1.1" and arch in fastext.wheels[0].url
        table = doc["tool"]["runner-patch"]
        assert table["architecture"] == arch and table["python"].startswith("3.11")
        assert "extra-host==1.0" in table["installed"] and "fastext==1.0" in table["installed"]
        assert table["requirements"][3] == "cuda-shim-cu12==1.0"
        assert [i for i in table["images"] if platform in i and f"{locked['repo']}:{TAG}" in i], table["images"]
        assert name in run.stdout and platform in run.stdout.split(name, 1)[1].split("\n")[0], run.stdout


def test_apply_locked_asks_no_index_and_matches_a_fresh_resolution(req_world, locked, index, tmp_path):
    world = req_world.wheels_world
    fresh_repo = "proof/requirements-lock-fresh"
    req_world.push(fresh_repo, TAG)
    fresh = wheelrun.apply(world.addr, fresh_repo, folder(tmp_path / "fresh", "req-lock", LINES, index_url=index.url),
                           tmp_path / "fresh.json")
    index.modes["page"] = index.modes["metadata"] = "503"
    asked = len(index.requests())
    run = apply_locked(world, locked["repo"], locked["folder"], tmp_path / "map.json")
    assert run.code == 0 and run.record["outcome"] == "patched", run.describe()
    since = index.requests()[asked:]
    assert [r for r in since if r.kind != "file"] == [], f"a locked apply asked the index: {since}"
    layers = {p["platform"]: p["added_layer"]["digest"] for p in run.record["platforms"]}
    assert layers == {p["platform"]: p["added_layer"]["digest"] for p in fresh.record["platforms"]}
    for p in run.record["platforms"]:
        assert "pylock." in p["reason"], p["reason"]


def test_no_lock_or_one_for_another_environment_is_refused(req_world, locked, index, tmp_path):
    world = req_world.wheels_world
    bare = folder(tmp_path / "bare", "req-lock", LINES, index_url=index.url)
    run = apply_locked(world, locked["repo"], bare, tmp_path / "m1.json")
    assert run.code == 1 and run.record["outcome"] == "refused", run.describe()
    assert "no lock" in run.record["platforms"][0]["reason"]
    other = tmp_path / "other"
    shutil.copytree(locked["folder"], other)
    (other / "pylock.aarch64-py311.toml").unlink()
    (other / "pylock.x86-64-py311.toml").rename(other / "pylock.toml")
    before = wheelrun.storage(world.registry_dir)
    run = apply_locked(world, locked["repo"], other, tmp_path / "m2.json")
    assert run.code == 1, run.describe()
    (arm,) = [p for p in run.record["platforms"] if p["platform"].startswith("linux/arm64")]
    assert "pylock.toml" in arm["reason"] and "architecture x86_64" in arm["reason"], arm["reason"]
    assert wheelrun.storage(world.registry_dir) == before


def test_without_locked_a_matching_lock_is_used_and_plan_says_so(req_world, locked, index):
    """On another repository holding the same image (the locked one is patched by now): the
    environment, not the name, picks the lock."""
    world = req_world.wheels_world
    repo = "proof/requirements-lock-again"
    req_world.push(repo, TAG)
    run = wheelrun.plan(world.addr, repo, locked["folder"])
    assert run.code == 0, run.describe()
    for p in run.record["platforms"]:
        assert "from pylock." in p["reason"], p["reason"]
    bare_plan = wheelrun.plan(world.addr, repo,
                              folder(locked["tmp"] / "bare-plan", "req-lock", LINES, index_url=index.url))
    for p in bare_plan.record["platforms"]:
        assert "resolved by uv" in p["reason"], p["reason"]


def test_locks_through_basic_credentials_hold_no_token(req_world, tmp_path):
    world = req_world.wheels_world
    token = "l0ck-t0ken-s3cret"
    forbidden = [token, base64.b64encode(f"ci:{token}".encode()).decode()]
    paths = sorted((req_world.work / "index").iterdir())
    repo = "proof/requirements-lock-auth"
    req_world.push(repo, TAG, arches=("amd64",))
    with pyindex.Index(paths, auth=("ci", token)) as ix:
        f = folder(tmp_path / "f", "req-lock-auth", ["tree-top"], index_url=ix.auth_url)
        made = lock(world, repo, f)
        assert made.code == 0, made.describe()
        dmap = tmp_path / "map.json"
        run = apply_locked(world, repo, f, dmap)
        assert run.code == 0 and run.record["outcome"] == "patched", run.describe()
        locks = [p.read_text() for p in f.glob("pylock*.toml")]
        assert locks, "lock wrote no file"
        for text in locks:
            Pylock.from_dict(tomllib.loads(text))
        texts = [made.stdout, made.stderr, run.stdout, run.stderr, dmap.read_text(), *locks]
        blobs = [p.read_bytes() for p in (world.registry_dir / "storage").rglob("data") if p.is_file()]
        for secret in forbidden:
            assert not any(secret in t for t in texts), "a token in a lock, an output or the map"
            assert not any(secret.encode() in b for b in blobs), "a token stored in the registry"
