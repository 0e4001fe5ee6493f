"""What the requirements route must refuse (issue 34), each with one line naming the cause and
nothing pushed: an sdist-only requirement, an unsatisfiable one, an index that answers 503, an
index that stalls (ended by the idle timeout), a `${NAME}` the image's Env lacks, an option line
in a requirements file (a bad folder: exit 2, before any request). And an index that wants Basic
credentials: named in patch.toml as `http://user:token@host/simple`, `plan` and `apply` work
through it, a wrong token is refused naming the 401, and the token (plain or base64) is in no
output, digest map, provenance statement or stored registry blob.
"""
from __future__ import annotations

import base64
import time

import pytest

from tests.proof import pyindex, reqset, wheelrun
from tests.proof.test_requirements_route import folder
from tests.proof.test_wheels_refusals import problem_lines

REPO = "proof/requirements-refuse"
TAG = wheelrun.TAG


@pytest.fixture(scope="module")
def image(req_world):
    return req_world.push(REPO, TAG, arches=("amd64",))["digest"]


def refused(req_world, image, tmp, f, codes, *words, extra=()) -> wheelrun.Run:
    """Apply F (with EXTRA options): exit in CODES, one line holding each of WORDS, nothing pushed."""
    world = req_world.wheels_world
    before = wheelrun.storage(world.registry_dir)
    run = wheelrun.tool("apply", *wheelrun.image_args(world.addr, REPO, TAG), *extra, "--patch", str(f),
                        "--digest-map", str(tmp / "map.json"), "--json")
    assert run.code in codes, f"expected exit {codes}: {run.describe()}"
    if run.code == 1:
        assert run.record["outcome"] == "refused", run.describe()
    hits = [line for line in problem_lines(run) if all(w.lower() in line.lower() for w in words)]
    assert hits, f"no line names {words}: {run.describe()}"
    assert all("\n" not in h for h in hits)
    assert wheelrun.storage(world.registry_dir) == before, "a refused run pushed something"
    assert wheelrun.served(world.addr, REPO) == image, "the tag moved"
    return run


@pytest.mark.parametrize("case,lines,mode,words", [
    ("sdist-only", ["tree-top", "sdist-only"], None, ("sdist-only", "no usable wheels")),
    ("unsatisfiable", ["tree-leaf>=9"], None, ("tree-leaf", "unsatisfiable")),
    ("conflicting", ["tree-leaf==1.0", "tree-mid"], None, ("tree-leaf", "tree-mid")),
    ("index down", ["tree-top"], "503", ("503",)),
    ("unset variable", ["cuda-shim-cu${CUDA_MAJOR}==1.0"], None, ("${CUDA_MAJOR}", "not set")),
])
def test_refusals_name_their_cause(req_world, image, index, tmp_path, case, lines, mode, words):
    if mode:
        index.modes["page"] = mode
    before = len(index.requests())
    f = folder(tmp_path / "f", f"req-{case.replace(' ', '-')}", lines, index_url=index.url)
    refused(req_world, image, tmp_path, f, (1,), *words)
    if case == "unset variable":
        assert len(index.requests()) == before, "an unset variable must refuse before any index is asked"


def test_a_stalling_index_ends_within_the_idle_timeout(req_world, image, index, tmp_path):
    index.modes["page"] = "stall"
    f = folder(tmp_path / "f", "req-stall", ["tree-top"], index_url=index.url)
    start = time.monotonic()
    refused(req_world, image, tmp_path, f, (1,), "tree-top", extra=("--idle-timeout", "2"))
    assert time.monotonic() - start < 90


def test_an_option_line_in_a_requirements_file_stops_the_run(req_world, image, index, tmp_path):
    f = folder(tmp_path / "f", "req-option", file="tree-top\n--extra-index-url https://packages.example.com/simple\n",
               index_url=index.url)
    before = len(index.requests())
    run = refused(req_world, image, tmp_path, f, (2,), "requirements.txt:2", "--extra-index-url", "option line")
    assert run.doc is None or not run.doc.get("images")
    assert len(index.requests()) == before


def test_an_index_behind_basic_credentials(req_world, image, tmp_path):
    world = req_world.wheels_world
    token = "s3cret-t0ken-4-index"
    forbidden = [token, base64.b64encode(f"ci:{token}".encode()).decode()]
    paths = sorted((req_world.work / "index").iterdir())
    with pyindex.Index(paths, auth=("ci", token)) as ix:
        f = folder(tmp_path / "ok", "req-auth", ["tree-top"], index_url=ix.auth_url)
        plan = wheelrun.plan(world.addr, REPO, f)
        assert plan.code == 0 and plan.record["outcome"] == "patched", plan.describe()
        repo = "proof/requirements-auth"
        req_world.push(repo, TAG, arches=("amd64",))
        dmap = tmp_path / "map.json"
        run = wheelrun.apply(world.addr, repo, f, dmap)
        assert run.record["outcome"] == "patched", run.describe()
        assert any(r.path.endswith(".whl") and r.authorized for r in ix.requests("file")), \
            "the wheels were not fetched with the index's credentials"
        bad = folder(tmp_path / "bad", "req-auth-bad", ["tree-top"], index_url=ix.auth_url.replace(token, "wrong"))
        (tmp_path / "wrong").mkdir()
        wrong = refused(req_world, image, tmp_path / "wrong", bad, (1,), "401")
        outputs = [plan.stdout, plan.stderr, run.stdout, run.stderr, wrong.stdout, wrong.stderr, dmap.read_text()]
        statements = [p.read_bytes() for p in (world.registry_dir / "storage").rglob("data") if p.is_file()]
        for secret in forbidden:
            assert not any(secret in o for o in outputs), "the token appears in an output or the map"
            assert not any(secret.encode() in b for b in statements), "the token is stored in the registry"
        # The patch as shown names the index without its credentials.
        shown = wheelrun.tool("patches", "--patch", str(f), "--json")
        assert token not in shown.stdout + shown.stderr


@pytest.mark.parametrize("case,script,words", [
    ("no uv", None, ("uv is not installed", "RUNNER_PATCH_UV")),
    ("not a file", None, ("RUNNER_PATCH_UV names", "not a file")),
    ("too old", "#!/bin/sh\necho 'uv 0.12.3 (x86_64-unknown-linux-gnu)'\n", ("uv 0.12.3", ">= 0.13.8")),
])
def test_no_uv_or_one_too_old(req_world, image, index, tmp_path, monkeypatch, case, script, words):
    fake = tmp_path / "uv"
    if script:
        fake.write_text(script)
        fake.chmod(0o755)
    if case == "no uv":
        import shutil
        if shutil.which("uv"):
            pytest.skip("a uv is on PATH here: the tool would find it")
        monkeypatch.delenv("RUNNER_PATCH_UV")
    else:
        monkeypatch.setenv("RUNNER_PATCH_UV", str(fake))
    f = folder(tmp_path / "f", "req-no-uv", ["tree-top"], index_url=index.url)
    refused(req_world, image, tmp_path, f, (1,), *words)
