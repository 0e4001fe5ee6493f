"""Self-tests of the requirements route's proof harness, without runner-patch: the index is a
PEP 503 index with PEP 658 metadata that answers 503, stalls, wants Basic credentials and logs
each request when told to; the fixture image carries the Env and the installed set the route's
cases start from; uv, run as the judge (chroot `--system` for amd64, `--target` for arm64),
installs what each case asks and refuses what it must; the tree comparison under uv's contract
passes uv's own tree and names each kind of difference.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from tests.proof import pyindex, pyroot, reqset, uvjudge, wheelimg
from tests.proof.wheeljudge import compare, pip_check, pip_list

REPO = "proof/requirements-harness"
TAG = "cuda12.8-vllm0.11.2"


def get(url: str, auth: tuple[str, str] | None = None, timeout: float = 10):
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def test_index_is_pep503_with_pep658_metadata(index):
    _, root = get(index.url + "/")
    for project in ("tree-top", "fastext", "sdist-only", "demo-pkg"):
        assert f'href="/simple/{project}/"' in root.decode()
    _, page = get(index.url + "/Tree_Top")  # not normalized: redirected to /simple/tree-top/
    links = re.findall(r'href="(/files/[^"#]+)#sha256=([0-9a-f]{64})"[^>]*data-core-metadata="sha256=([0-9a-f]{64})"',
                       page.decode())
    assert [link[0] for link in links] == ["/files/tree_top-1.0-py3-none-any.whl"]
    for path, sha, meta_sha in links:
        _, wheel = get(index.base + path)
        _, meta = get(index.base + path + ".metadata")
        assert hashlib.sha256(wheel).hexdigest() == sha and hashlib.sha256(meta).hexdigest() == meta_sha
        assert b"Name: tree-top\n" in meta and b"Requires-Dist: tree-mid>=1.0" in meta
    _, fast = get(index.url + "/fastext/")
    assert fast.decode().count("<a ") == 5  # 1.0 and 1.1 for two architectures, and a cp312 1.1
    _, sdist = get(index.url + "/sdist-only/")
    assert "sdist_only-1.0.tar.gz#sha256=" in sdist.decode() and "data-core-metadata" not in sdist.decode()
    with pytest.raises(urllib.error.HTTPError) as err:
        get(index.url + "/no-such-project/")
    assert err.value.code == 404
    _, meta = get(index.base + "/files/extra_host-1.0-py3-none-any.whl.metadata")
    assert b"Provides-Extra: fancy\n" in meta and b'Requires-Dist: fancy-lib>=1.0; extra == "fancy"' in meta


def test_index_modes_and_log(index):
    before = len(index.requests())
    index.modes["page"] = "503"
    with pytest.raises(urllib.error.HTTPError) as err:
        get(index.url + "/tree-top/")
    assert err.value.code == 503
    _, wheel = get(index.base + "/files/tree_top-1.0-py3-none-any.whl")  # files still served
    assert wheel.startswith(b"PK")
    index.modes["page"], index.modes["file"] = "ok", "stall"
    with pytest.raises(TimeoutError):
        get(index.base + "/files/tree_top-1.0-py3-none-any.whl", timeout=1)
    log = index.requests()[before:]
    assert [(r.kind, r.status) for r in log] == [("page", 503), ("file", 200), ("file", 0)]


def test_index_basic_auth(tmp_path):
    paths = [w.write(tmp_path) for w in reqset.tree()]
    with pyindex.Index(paths, auth=("ci", "s3cret-token")) as index:
        with pytest.raises(urllib.error.HTTPError) as err:
            get(index.url + "/tree-top/")
        assert err.value.code == 401 and "Basic" in err.value.headers["WWW-Authenticate"]
        with pytest.raises(urllib.error.HTTPError):
            get(index.url + "/tree-top/", auth=("ci", "wrong"))
        status, _ = get(index.url + "/tree-top/", auth=("ci", "s3cret-token"))
        assert status == 200
        assert [r.authorized for r in index.requests()] == [False, False, True]
        assert index.auth_url.startswith("http://ci:s3cret-token@127.0.0.1:")


@pytest.fixture(scope="module")
def original(req_world, tmp_path_factory):
    pushed = req_world.push(REPO, TAG)
    root = wheelimg.unpack(req_world.wheels_world.addr, REPO, "@" + pushed["digest"], "amd64",
                           tmp_path_factory.mktemp("orig"))
    return pushed, root


def test_fixture_image_env_and_installed_set(req_world, original, tmp_path):
    pushed, root = original
    for cfg in pushed["configs"].values():
        assert "CUDA_VERSION=12.8" in cfg["config"]["Env"]
    out = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--config", "--override-arch", "arm64",
                          f"docker://{req_world.wheels_world.addr}/{REPO}:{TAG}"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "CUDA_VERSION=12.8" in json.loads(out.stdout)["config"]["Env"]
    listed = pip_list(root)
    for name, version in reqset.PRESENT:
        assert listed[name] == version
    assert pip_check(root) == []
    assert (root / wheelimg.SITE / "fastext/ARCH").read_text() == "x86_64"
    arm = wheelimg.unpack(req_world.wheels_world.addr, REPO, "@" + pushed["digest"], "arm64", tmp_path / "arm")
    assert (arm / wheelimg.SITE / "fastext/ARCH").read_text() == "aarch64"
    assert (arm / wheelimg.SITE / "extra_host-1.0.dist-info/METADATA").is_file()


def test_uv_installs_a_new_tree_in_a_chroot(req_world, original, index, tmp_path):
    root = wheelimg.copy_root(original[1], tmp_path / "uv")
    before = wheelimg.snapshot(root)
    r = uvjudge.system(root, ["tree-top"], index.url)
    assert "tree-leaf==2.0" in r.stderr, r.stderr
    listed = pip_list(root)
    assert {n: listed[n] for n in ("tree-top", "tree-mid", "tree-leaf")} == {
        "tree-top": "1.0", "tree-mid": "1.0", "tree-leaf": "2.0"}
    assert pip_check(root) == []
    assert pyroot.chroot(root, "/usr/local/bin/tree-top").stdout == "tree-top 1.0\n"
    dist = root / wheelimg.SITE / "tree_top-1.0.dist-info"
    assert (dist / "INSTALLER").read_text() == "uv" and (dist / "REQUESTED").is_file()
    after = wheelimg.snapshot(root)
    outside = [p for p in set(before) | set(after) if before.get(p) != after.get(p)
               and not p.startswith(("usr/local/lib/python3.11/dist-packages/", "usr/local/bin/"))]
    assert outside == [], f"the judge left more than uv's install: {sorted(outside)}"


def test_uv_keeps_what_satisfies_and_adds_an_extra_and_an_env_line(req_world, original, index, tmp_path):
    root = wheelimg.copy_root(original[1], tmp_path / "uv")
    host = root / wheelimg.SITE / "extra_host-1.0.dist-info"
    kept = {p.name: p.read_bytes() for p in host.iterdir()}
    uvjudge.system(root, ["extra-host[fancy]", "cuda-shim-cu12==1.0", "demo-pkg>=1.0"], index.url)
    listed = pip_list(root)
    assert (listed["extra-host"], listed["fancy-lib"], listed["cuda-shim-cu12"], listed["demo-pkg"]) == (
        "1.0", "1.1", "1.0", "1.0")
    assert {p.name: p.read_bytes() for p in host.iterdir()} == kept, "an installed dist that satisfies is kept"
    assert pip_check(root) == []


def test_uv_upgrades_a_binary_package_for_arm64_by_target(req_world, original, index, tmp_path):
    arm = wheelimg.unpack(req_world.wheels_world.addr, REPO, "@" + original[0]["digest"], "arm64", tmp_path / "arm")
    site = arm / wheelimg.SITE
    r = uvjudge.target(site, ["fastext>=1.1"], index.url)
    assert "fastext==1.1" in r.stderr and "fastext==1.0" in r.stderr, r.stderr  # uninstalled, then installed
    assert (site / "fastext/ARCH").read_text() == "aarch64"
    assert sorted(p.name for p in (site / "fastext").iterdir()) == [
        "ARCH", "__init__.py", "_native.cpython-311-aarch64-linux-gnu.so"]
    assert b"fastext 1.1" in (site / "fastext/_native.cpython-311-aarch64-linux-gnu.so").read_bytes()
    assert not (site / "fastext-1.0.dist-info").exists() and (site / "fastext-1.1.dist-info/RECORD").is_file()
    assert wheelimg.check_record(site, "fastext-1.1.dist-info/RECORD") == []


@pytest.mark.parametrize("case,lines,mode,says", [
    ("sdist-only", ["sdist-only"], None, "sdist-only"),
    ("unsatisfiable", ["tree-leaf>=9"], None, "tree-leaf"),
    ("index down", ["tree-top"], "503", "503"),
])
def test_uv_refuses_what_the_route_must_refuse(req_world, original, index, tmp_path, case, lines, mode, says):
    """What uv itself says of each refusal the route names (wheels only: `--only-binary`)."""
    if mode:
        index.modes["page"] = mode
    site = tmp_path / "site"
    shutil.copytree(original[1] / wheelimg.SITE, site, symlinks=True)
    r = uvjudge.target(site, lines, index.url, "--only-binary", ":all:", platform="x86_64-manylinux_2_36",
                       check=False, timeout=120)
    assert r.returncode != 0, f"{case}: uv installed {lines}: {r.stderr}"
    assert says in r.stderr, f"{case}: {r.stderr}"
    assert not list(site.glob("tree_top*")) and not list(site.glob("sdist_only*"))


def test_uv_judge_compares_under_uvs_contract(req_world, original, index, tmp_path):
    """uv twice on the same tree: no difference. The reference image (uv's change as a layer,
    through the registry and umoci) with a pip-style dist-info (INSTALLER pip, no REQUESTED, no
    uv_cache.json): no difference. Then each kind of difference is named."""
    a, b = (wheelimg.copy_root(original[1], tmp_path / n) for n in ("a", "b"))
    for r in (a, b):
        uvjudge.system(r, ["tree-top", "fancy-lib==1.0"], index.url)
    assert compare(a, b, "uv") == []
    dist = b / wheelimg.SITE / "tree_top-1.0.dist-info"
    (dist / "INSTALLER").write_text("runner-patch\n")
    for optional in ("REQUESTED", "uv_cache.json"):
        (dist / optional).unlink(missing_ok=True)
    assert compare(a, b, "uv") == []
    site = wheelimg.SITE
    (b / site / "tree_leaf/__init__.py").write_text("changed\n")
    (b / site / "tree_mid/__init__.py").chmod(0o600)
    (b / site / "fancy_lib/stray.py").write_text("")
    shutil.rmtree(b / site / "tree_top")
    got = "\n".join(compare(a, b, "uv"))
    for want in ("tree_leaf/__init__.py: bytes differ", "tree_mid/__init__.py: mode/owner 0o600",
                 "only in runner-patch's tree: /" + site + "/fancy_lib/stray.py",
                 "only in uv's tree: /" + site + "/tree_top/__init__.py"):
        assert want in got, f"{want!r} not reported:\n{got}"
    (a / site / "tree_top-1.0.dist-info/INSTALLER").write_text("pip\n")
    assert "INSTALLER is" in "\n".join(compare(a, b, "uv")), "the judge's INSTALLER must be uv's"
