"""Self-tests of the wheels proof's harness, without runner-patch: the test wheels are valid
(RECORD agrees with every entry, pip installs them), the fixture image holds what pip installed
(pip list, pip check, launchers, in a chroot of the umoci-unpacked image), the locks are
PEP 751 as TOML reads them, and the tree comparison finds what it must find and lets through
only what pip's install contract leaves free.
"""
from __future__ import annotations

import os
import shutil
import tomllib
import urllib.request
from pathlib import Path

import pytest

from imagekit.wheel import check_record, record_hash
from tests.proof import pylock, pyroot, wheelimg, wheelset
from tests.proof.test_wheels_pip import CASES
from tests.proof.wheeljudge import compare, inside, pip_check, pip_list

REPO = "proof/harness"
TAG = "cuda12.8-vllm0.11.2"


def test_wheels_are_valid_and_reproducible(tmp_path):
    wheels = [wheelset.demo_pkg_2(), wheelset.fastext("amd64"), wheelset.fastext("arm64"), *wheelset.installed_wheels()]
    for w in wheels:
        path = w.write(tmp_path / "a")
        assert check_record(path) == len(w.entries())
        assert w.write(tmp_path / "b").read_bytes() == path.read_bytes(), f"{w.filename} is not reproducible"
    assert wheelset.fastext("amd64").filename == "fastext-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"


def test_pyroot_runs_pip(as_root):
    assert "pip 23" in pyroot.check(pyroot.build("amd64"))


@pytest.fixture(scope="module")
def original(wheels_world, tmp_path_factory):
    w = wheels_world
    pushed = w.layers.push(w.addr, REPO, TAG, arches=("amd64", "arm64"), style="oci")
    root = wheelimg.unpack(w.addr, REPO, "@" + pushed["digest"], "amd64", tmp_path_factory.mktemp("orig"))
    return pushed, root


def test_fixture_image_holds_pips_install(wheels_world, original, tmp_path):
    _, root = original
    listed = pip_list(root)
    for name, version in wheelset.INSTALLED:
        assert listed[name] == version
        installer = root / wheelimg.SITE / f"{name.replace('-', '_')}-{version}.dist-info" / "INSTALLER"
        assert installer.read_text() == "pip\n"
    assert pip_check(root) == []
    assert (root / wheelimg.SITE / "demo_pkg/__pycache__").is_dir(), "the fixture install compiles bytecode"
    assert pyroot.chroot(root, "/usr/local/bin/demo").stdout == "demo-pkg 1.0\n"
    arm = wheelimg.unpack(wheels_world.addr, REPO, "@" + original[0]["digest"], "arm64", tmp_path / "arm")
    assert (arm / "usr/lib/aarch64-linux-gnu").is_dir() and (arm / wheelimg.SITE / "nsshare/b").is_dir()


def test_locks_are_pep751(wheels_world, tmp_path):
    by_path = pylock.folder(tmp_path / "p", "lock-path", [wheelset.demo_pkg_2(), wheelset.fastext("amd64"),
                                                           wheelset.fastext("arm64")], remove=["nsshare-a"])
    by_url = pylock.folder(tmp_path / "u", "lock-url", [wheelset.fresh_pkg()], base_url=wheels_world.url,
                           served=wheels_world.served)
    for folder in (by_path, by_url):
        lock = tomllib.loads((folder / "pylock.toml").read_text())
        assert lock["lock-version"] == "1.0"
        patch = tomllib.loads((folder / "patch.toml").read_text())
        assert patch["kind"] == "wheels" and patch["lock"] == "pylock.toml"
        for pkg in lock["packages"]:
            for wh in pkg["wheels"]:
                assert set(wh) >= {"name", "size", "hashes"} and ("path" in wh) != ("url" in wh)
    fastext = [p for p in tomllib.loads((by_path / "pylock.toml").read_text())["packages"] if p["name"] == "fastext"]
    assert len(fastext) == 1 and len(fastext[0]["wheels"]) == 2
    wh = tomllib.loads((by_url / "pylock.toml").read_text())["packages"][0]["wheels"][0]
    with urllib.request.urlopen(wh["url"]) as r:
        assert len(r.read()) == wh["size"]


def test_compare_finds_differences_and_allows_free_ones(wheels_world, original, tmp_path):
    _, root = original
    w2 = wheelset.demo_pkg_2().write(tmp_path / "w")
    a, b = (wheelimg.copy_root(root, tmp_path / n) for n in ("a", "b"))
    for r in (a, b):
        wheelimg.pip_install(r, [w2], ["demo-pkg==2.0"])
    assert compare(a, b) == [], "pip twice on the same tree gives the same tree"
    site = wheelimg.SITE
    dist = b / site / "demo_pkg-2.0.dist-info"
    # free: another launcher template, RECORD rows in another order, another INSTALLER
    (b / "usr/local/bin/demo").write_text("#!/usr/bin/python3.11\nimport sys\nfrom demo_pkg.cli import main\n"
                                          "sys.exit(main())\n")
    rows = (dist / "RECORD").read_text().splitlines()
    (dist / "INSTALLER").write_text("runner-patch\n")
    fixed = []
    for row in reversed(rows):
        path = row.split(",")[0]
        if path.endswith("bin/demo") or path.endswith("/INSTALLER"):
            data = Path(os.path.normpath(dist.parent / path)).read_bytes()
            row = f"{path},{record_hash(data)},{len(data)}"
        fixed.append(row)
    (dist / "RECORD").write_text("\n".join(fixed) + "\n")
    assert compare(a, b) == []
    # not free: a changed byte, a mode, an extra file, a launcher of another entry point
    (b / site / "demo_pkg/util/fmt.py").write_text("changed\n")
    (b / site / "demo_pkg/cli.py").chmod(0o600)
    (b / site / "demo_pkg/stray.py").write_text("")
    (b / "usr/local/bin/demo-admin").write_text("#!/usr/bin/python3\nfrom demo_pkg.util import fmt\nfmt()\n")
    shutil.rmtree(b / site / "demo_pkg_plugins")
    got = "\n".join(compare(a, b))
    for want in ("demo_pkg/util/fmt.py: bytes differ", "demo_pkg/cli.py: mode/owner 0o600",
                 "only in runner-patch's tree: /" + site + "/demo_pkg/stray.py",
                 "usr/local/bin/demo-admin: launcher does not call", "only in pip's tree: /" + site + "/demo_pkg_plugins",
                 "RECORD: demo_pkg/util/fmt.py has", "RECORD: demo_pkg_plugins/__init__.py is not there"):
        assert want in got, f"{want!r} not reported:\n{got}"


def test_broken_locks_are_what_they_claim(tmp_path):
    """Each lock test_wheels_refusals.py hands in is broken in exactly its own way."""
    from tests.proof.test_wheels_refusals import BROKEN, broken_lock
    locks = {case: (broken_lock(tmp_path, case, edit) / "pylock.toml").read_text() for case, (edit, _) in BROKEN.items()}
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(locks["bad-toml"])
    assert "lock-version" not in tomllib.loads(locks["no-lock-version"])
    assert tomllib.loads(locks["lock-version-2"])["lock-version"] == "2.0"
    (pkg,) = tomllib.loads(locks["no-hashes"])["packages"]
    assert pkg["wheels"] and all("hashes" not in w for w in pkg["wheels"])
    (pkg,) = tomllib.loads(locks["sdist-only"])["packages"]
    assert "wheels" not in pkg and pkg["sdist"]["hashes"]["sha256"]


def test_tamper_makes_a_valid_image_with_one_file_changed(wheels_world, original, tmp_path):
    """The lifecycle test's tampering, on the fixture image (whose top layer is pip's install):
    umoci unpacks the result (every diff_id checked) and sees only that file changed."""
    from tests.proof.test_wheels_lifecycle import TAMPERED, tamper
    path = tamper(wheels_world.addr, REPO, original[0]["digest"], b"demo-pkg 1.0", b"demo-pkg 6.6")
    assert path.endswith("demo_pkg/cli.py")
    root = wheelimg.unpack(wheels_world.addr, REPO, ":" + TAMPERED, "amd64", tmp_path / "t")
    a, b = wheelimg.snapshot(original[1]), wheelimg.snapshot(root)
    assert sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p)) == [f"{wheelimg.SITE}/demo_pkg/cli.py"]
    assert b"demo-pkg 6.6" in (root / wheelimg.SITE / "demo_pkg/cli.py").read_bytes()


def test_pip_for_arm64_picks_the_aarch64_wheel(as_root, tmp_path):
    """The arm64 judge: pip, told the platform, takes the aarch64 cp311 wheel of the three."""
    wheels = [wheelset.fastext("amd64").write(tmp_path / "w"), wheelset.fastext("arm64").write(tmp_path / "w"),
              wheelset.fastext("amd64", "cp312").write(tmp_path / "w")]
    site = wheelimg.pip_for_platform(tmp_path / "r", wheels, ["fastext==1.0"], "manylinux_2_17_aarch64")
    assert (site / "fastext/ARCH").read_text() == "aarch64"
    assert sorted(p.name for p in (site / "fastext").iterdir()) == [
        "ARCH", "__init__.py", "_native.cpython-311-aarch64-linux-gnu.so"]
    assert wheelimg.check_record(site, "fastext-1.0.dist-info/RECORD") == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_judges_pass_an_image_equal_to_pips_install(wheels_world, original, tmp_path, name):
    """The judges of test_wheels_pip.py on an image whose top layer is exactly pip's change
    (`wheelimg.diff_layer`, whiteouts for what pip removed), through the registry and umoci:
    no difference, the case's own expectations hold (so they hold for pip's tree), and `inside`
    passes when the warnings are pip check's own lines."""
    _repo, _pid, wheels, install, opts, shows, versions, imports, gone = CASES[name]
    paths = [w.write(tmp_path / "w") for w in wheels()]
    pip_root = wheelimg.copy_root(original[1], tmp_path / "pip")
    if install:
        wheelimg.pip_install(pip_root, paths, install)
    if opts.get("remove"):
        pyroot.pip(pip_root, "uninstall", "-y", *opts["remove"])
    ref = wheelimg.diff_layer(original[1], pip_root, f"reference of {name}")
    repo = f"proof/harness-ref-{name}"
    pushed = wheels_world.layers.push(wheels_world.addr, repo, TAG, extra=lambda _a: [ref])
    root = wheelimg.unpack(wheels_world.addr, repo, "@" + pushed["digest"], "amd64", tmp_path / "ref")
    assert compare(pip_root, root) == []
    shows(root)
    record = {"platform": "linux/amd64", "warnings": pip_check(pip_root)}
    inside(pip_root, root, versions, imports, record, gone=gone)


def test_arm64_judge_passes_pips_platform_install(wheels_world, original, tmp_path):
    """The arm64 judge of test_wheels_pip.py on a two-platform image whose arm64 top layer is
    what pip installs for manylinux_2_17_aarch64 (and amd64's is pip's own install)."""
    from imagekit.layer import Layer
    from tests.proof.test_wheels_pip import shows_fastext_arm64
    _repo, _pid, wheels, install, *_ = CASES["binary"]
    paths = [w.write(tmp_path / "w") for w in wheels()]
    amd = wheelimg.copy_root(original[1], tmp_path / "amd")
    wheelimg.pip_install(amd, paths, install)
    refs = {"amd64": wheelimg.diff_layer(original[1], amd, "reference amd64")}
    site = wheelimg.pip_for_platform(tmp_path / "arm", paths, install, "manylinux_2_17_aarch64")
    arm = Layer("reference arm64")
    for rel, entry in sorted(wheelimg.snapshot(site).items()):
        if entry[0] == "dir":
            arm.dir(f"{wheelimg.SITE}/{rel}", entry[1])
        else:
            arm.file(f"{wheelimg.SITE}/{rel}", (site / rel).read_bytes(), entry[1])
    refs["arm64"] = arm
    repo = "proof/harness-ref-arm64"
    pushed = wheels_world.layers.push(wheels_world.addr, repo, TAG, arches=("amd64", "arm64"), style="oci",
                                      extra=lambda a: [refs[a]])
    record = {"patched_digest": pushed["digest"],
              "platforms": [{"platform": p, "added_layer": {"digest": refs[p.split("/")[1]].build()["digest"]}}
                            for p in pushed["children"]]}
    shows_fastext_arm64(wheels_world, repo, record, tmp_path, paths)


def test_hostile_wheels_are_what_they_claim(as_root, tmp_path):
    """Each hostile wheel of test_wheels_refusals.py is broken in its own way; pip itself
    refuses the climbing one."""
    import zipfile
    paths = {n: f().write(tmp_path / n) for n, f in (("climbing", wheelset.climbing), ("absolute", wheelset.absolute),
                                                    ("twice", wheelset.twice), ("bad-record", wheelset.bad_record))}
    with zipfile.ZipFile(paths["climbing"]) as zf:
        assert "../../../../../etc/climbed.conf" in zf.namelist()
    with zipfile.ZipFile(paths["absolute"]) as zf:
        assert "/etc/absolute.conf" in zf.namelist()
    with zipfile.ZipFile(paths["twice"]) as zf:
        assert zf.namelist().count("twice/__init__.py") == 2
    for name in ("climbing", "absolute"):
        assert check_record(paths[name])  # RECORD agrees with the archive: only the names are hostile
    with pytest.raises(ValueError, match="bad_record/__init__.py"):
        check_record(paths["bad-record"])
    root = wheelimg.copy_root(pyroot.build("amd64"), tmp_path / "root")
    with pytest.raises(AssertionError, match="outside"):
        wheelimg.pip_install(root, [paths["climbing"]], ["climber==1.0"])
    assert not (root / "etc/climbed.conf").exists()
