"""Locks written by the usual tools, not by hand: `pip lock` (old-only 1.5, a downgrade) and
`uv pip compile --format pylock.toml --universal` (fastext 1.0 with its x86_64 and aarch64
wheels, on a two-platform image), each from wheels on a local find-links page with `--no-index`.
runner-patch must accept each lock as written, and the result is judged by pip as in
test_wheels_pip.py. The tools live in a venv of their own (`python3 -m tests.proof.locktools
install`, which .ci/run runs); without it these tests are skipped, saying so.
"""
from __future__ import annotations

import tomllib

import pytest

from tests.proof import locktools, pylock, wheelset
from tests.proof.test_wheels_pip import prove_folder, shows_downgrade, shows_fastext_arm64
from tests.proof.wheelimg import SITE


def need(name: str):
    if locktools.tool(name) is None:
        pytest.skip(f"{name} for writing locks is not installed: run `python3 -m tests.proof.locktools install`")


def folder_with_lock(tmp, pid: str, write, world, wheels, requirements, **toml) -> tuple:
    folder = tmp / pid
    folder.mkdir()
    paths = [w.write(world.served / pid) for w in wheels]  # a find-links page of these wheels only
    write(f"{world.url}/{pid}/", requirements, folder / "pylock.toml")
    (folder / "patch.toml").write_text(pylock.patch_toml(pid, **toml))
    return folder, paths, tomllib.loads((folder / "pylock.toml").read_text())


def test_pip_lock(wheels_world, tmp_path):
    need("pip")
    folder, paths, lock = folder_with_lock(tmp_path, "pip-locked", locktools.pip_lock, wheels_world,
                                           [wheelset.old_only("1.5"), wheelset.old_only("2.0")], ["old-only==1.5"])
    assert lock["created-by"] == "pip" and [p["name"] for p in lock["packages"]] == ["old-only"]
    assert lock["packages"][0]["wheels"][0]["url"] == f"{wheels_world.url}/pip-locked/{paths[0].name}"
    _, _, tool_root = prove_folder(wheels_world, tmp_path, "proof/wheels-pip-lock", folder, paths, ["old-only==1.5"])
    shows_downgrade(tool_root)


def test_uv_lock(wheels_world, tmp_path):
    need("uv")
    folder, paths, lock = folder_with_lock(tmp_path, "uv-locked", locktools.uv_lock, wheels_world,
                                           [wheelset.fastext("amd64"), wheelset.fastext("arm64")], ["fastext==1.0"],
                                           target="/" + SITE)
    assert lock["created-by"] == "uv" and len(lock["packages"][0]["wheels"]) == 2
    record, _, tool_root = prove_folder(wheels_world, tmp_path, "proof/wheels-uv-lock", folder, paths,
                                        ["fastext==1.0"], arches=("amd64", "arm64"), style="oci")
    assert (tool_root / SITE / "fastext/ARCH").read_text() == "x86_64"
    shows_fastext_arm64(wheels_world, "proof/wheels-uv-lock", record, tmp_path, paths)
