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


def site_only(site: Path, dest: Path, outside: tuple[str, ...]) -> Path:
    """A root holding only SITE's tree at wheelimg.SITE, without its entries named in OUTSIDE
    (uv's `--target` `bin/` and its `.lock` file), each RECORD without rows for paths outside the site (launchers:
    `bin/x` under `--target`, `../../../bin/x` under `--system`); the arm64 judge compares
    such roots."""
    import shutil
    root = dest / "root"
    shutil.copytree(site, root / wheelimg.SITE, symlinks=True)
    for name in outside:
        p = root / wheelimg.SITE / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    for record in (root / wheelimg.SITE).glob("*.dist-info/RECORD"):
        rows = [r for r in record.read_text().splitlines(keepends=True)
                if not r.startswith(("../", "bin/", "/"))]
        record.write_text("".join(rows))
    return root


def test_apply_gives_each_platform_what_uv_gives(req_world, route, index, tmp_path):
    world = req_world.wheels_world
    dmap = route["tmp"] / "map.json"
    run = wheelrun.apply(world.addr, route["repo"], route["folder"], dmap)
    rec = run.record
    assert rec["outcome"] == "patched", run.describe()
    route["map"], route["patched"] = dmap, rec["patched_digest"]
    # amd64: uv --system in a chroot of the original, against the tool's patched tree.
    original = wheelimg.unpack(world.addr, route["repo"], "@" + route["original"], "amd64", tmp_path / "o")
    judge = wheelimg.copy_root(original, tmp_path / "uv")
    uvjudge.system(judge, EXPANDED, index.url)
    patched = wheelimg.unpack(world.addr, route["repo"], "@" + rec["patched_digest"], "amd64", tmp_path / "p")
    diffs = compare(judge, patched, "uv")
    assert diffs == [], "the patched amd64 tree differs from uv's:\n  " + "\n  ".join(diffs[:25])
    assert pip_check(patched) == []
    listed = pip_list(patched)
    assert (listed["tree-top"], listed["tree-leaf"], listed["fastext"], listed["fancy-lib"],
            listed["cuda-shim-cu12"], listed["extra-host"]) == ("1.0", "2.0", "1.1", "1.1", "1.0", "1.0")
    from tests.proof import pyroot
    assert pyroot.chroot(patched, "/usr/local/bin/tree-top").stdout == "tree-top 1.0\n"
    code = "import fastext, fancy_lib, cuda_shim_cu12, tree_top; print(fastext.ARCH, fastext.VERSION)"
    assert pyroot.chroot(patched, pyroot.PYTHON, "-c", code).stdout == "x86_64 1.1\n"
    # arm64: uv --target the original's site for aarch64, against the tool's site.
    arm_orig = wheelimg.unpack(world.addr, route["repo"], "@" + route["original"], "arm64", tmp_path / "ao")
    uvjudge.target(arm_orig / wheelimg.SITE, EXPANDED, index.url)
    arm = wheelimg.unpack(world.addr, route["repo"], "@" + rec["patched_digest"], "arm64", tmp_path / "ap")
    diffs = compare(site_only(arm_orig / wheelimg.SITE, tmp_path / "aj", ("bin", ".lock")),
                    site_only(arm / wheelimg.SITE, tmp_path / "at", ()), "uv")
    assert diffs == [], "the patched arm64 site differs from uv's:\n  " + "\n  ".join(diffs[:25])
    assert (arm / wheelimg.SITE / "fastext/ARCH").read_text() == "aarch64"
    # The map and the statement name what was installed, never a credential.
    for plat in rec["platforms"]:
        (step,) = plat["patches"]
        got = {(w["name"], w["version"]) for w in step["installed"]}
        assert got == {("tree-top", "1.0"), ("tree-mid", "1.0"), ("tree-leaf", "2.0"), ("fancy-lib", "1.1"),
                       ("cuda-shim-cu12", "1.0"), ("fastext", "1.1")}, step
        assert all(re.fullmatch(r"[0-9a-f]{64}", w["sha256"]) and w["wheel"].endswith(".whl")
                   for w in step["installed"])
    # Each platform's provenance statement names the wheels among what the layer was built from.
    statements = [json.loads(p.read_bytes()) for p in (world.registry_dir / "storage").rglob("data")
                  if p.is_file() and p.stat().st_size < 1 << 20 and b"in-toto" in p.read_bytes()[:200]]
    named = {}
    for st in statements:
        if "in-toto.io/Statement" not in str(st.get("_type")):
            continue  # an artifact manifest, not the statement it carries
        if st["subject"][0].get("digest", {}).get("sha256") not in {
                c.split(":")[1] for c in (p["patched_digest"] for p in rec["platforms"])}:
            continue
        for dep in st["predicate"]["buildDefinition"]["resolvedDependencies"]:
            if "wheel" in dep.get("annotations", {}):
                named.setdefault(st["subject"][0]["annotations"]["platform"], set()).add(
                    (dep["name"], dep["digest"]["sha256"]))
    for plat in rec["platforms"]:
        (step,) = plat["patches"]
        assert named.get(plat["platform"]) == {(f"{w['name']}=={w['version']}", w["sha256"])
                                               for w in step["installed"]}, named


def test_rerun_is_already_patched_verify_passes_rollback_restores(req_world, route, index):
    world = req_world.wheels_world
    assert "map" in route, "the apply test did not run"
    before = wheelrun.storage(world.registry_dir)
    again = wheelrun.apply(world.addr, route["repo"], route["folder"], route["tmp"] / "again.json")
    assert again.record["outcome"] == "already-patched", again.describe()
    assert "uv finds the requirement lines" in again.record["platforms"][0]["reason"]
    assert wheelrun.storage(world.registry_dir) == before, "a re-run pushed something"
    v = wheelrun.verify(route["folder"], route["map"])
    assert v.code == 0, v.describe()
    r = wheelrun.rollback(route["map"])
    assert r.code == 0, r.describe()
    assert wheelrun.served(world.addr, route["repo"]) == route["original"]


def test_requirements_already_satisfied_push_nothing(req_world, index, tmp_path):
    world = req_world.wheels_world
    repo = "proof/requirements-satisfied"
    pushed = req_world.push(repo, TAG, arches=("amd64",))
    f = folder(tmp_path / "met", "req-met", file="# already there\ndemo-pkg>=1.0\nextra-host\nbase-lib==1.0\n",
               index_url=index.url)
    before = wheelrun.storage(world.registry_dir)
    run = wheelrun.apply(world.addr, repo, f, tmp_path / "map.json")
    assert run.record["outcome"] == "already-patched", run.describe()
    assert run.record["platforms"][0].get("added_layer") is None
    assert wheelrun.served(world.addr, repo) == pushed["digest"]
    assert wheelrun.storage(world.registry_dir) == before
