"""The compile route (issue 36): an operation that builds a package from source becomes a wheel
built once per architecture and Python by a CI job, published as a find-links folder, pinned by
`runner-patch lock` and installed at the registry by `apply --locked`, with no compiler near the
image. Shown on a small package with a C extension, built here by `pip wheel` (the host's
CPython 3.11 and gcc, as the example workflow's job does per architecture), served by plain
HTTP as a find-links folder, locked by hash, installed, then imported and run in a chroot of
the patched image.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.proof import pyroot, wheelimg, wheelrun
from tests.proof.pylock import BACKEND, WheelServer

TAG = wheelrun.TAG
C_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* fastsum._native.add(a, b): the sum of two integers, computed in C. */
static PyObject *add(PyObject *self, PyObject *args) {
    long long a, b;
    if (!PyArg_ParseTuple(args, "LL", &a, &b)) return NULL;
    return PyLong_FromLongLong(a + b);
}

static PyMethodDef methods[] = {{"add", add, METH_VARARGS, "a + b"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};
PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
"""
SETUP = """from setuptools import Extension, setup

setup(name="fastsum", version="1.0", packages=["fastsum"],
      ext_modules=[Extension("fastsum._native", ["fastsum/_native.c"])])
"""


def build_wheel(work: Path) -> Path:
    """`pip wheel` of the package: its C extension compiled by gcc for this machine's CPython."""
    src = work / "src"
    (src / "fastsum").mkdir(parents=True)
    (src / "fastsum" / "_native.c").write_text(C_SOURCE)
    (src / "fastsum" / "__init__.py").write_text("from fastsum._native import add\n")
    (src / "setup.py").write_text(SETUP)
    out = work / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                        "--disable-pip-version-check", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"pip wheel: {r.stdout}\n{r.stderr}"
    (wheel,) = out.glob("fastsum-1.0-cp311-cp311-*.whl")
    return wheel


@pytest.fixture(scope="module")
def host_python():
    if sys.version_info[:2] != (3, 11):
        pytest.fail(f"the compile route builds for the fixture's CPython 3.11; this is {sys.version}")


def test_a_wheel_built_once_is_locked_and_installed_by_apply_locked(req_world, host_python, tmp_path):
    world = req_world.wheels_world
    wheel = build_wheel(tmp_path)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    repo = "proof/compile-route"
    pushed = req_world.push(repo, TAG, arches=("amd64",))
    with WheelServer(wheel.parent) as url:
        folder = tmp_path / "patch"
        folder.mkdir()
        (folder / "patch.toml").write_text(
            'id = "fastsum"\nkind = "wheels"\ntitle = "fastsum, built once by CI"\n'
            f'backends = ["{BACKEND}"]\nrequirements = ["fastsum==1.0"]\n'
            f'find-links = ["{url}/"]\nno-index = true\n')
        lock = wheelrun.tool("lock", *wheelrun.image_args(world.addr, repo, TAG), "--patch", str(folder))
        assert lock.code == 0, lock.describe()
        (written,) = folder.glob("pylock*.toml")
        doc = tomllib.loads(written.read_text())
        (pkg,) = [p for p in doc["packages"] if p["name"] == "fastsum"]
        hashes = [w["hashes"]["sha256"] for w in pkg.get("wheels", [])]
        assert hashes == [digest], f"the lock does not pin the built wheel ({digest}): {pkg}"
        run = wheelrun.tool("apply", *wheelrun.image_args(world.addr, repo, TAG), "--locked", "--patch", str(folder),
                            "--digest-map", str(tmp_path / "map.json"), "--json")
        assert run.code == 0 and run.record["outcome"] == "patched", run.describe()
        assert run.record["platforms"][0]["reason"].startswith("from pylock"), run.describe()
    patched = wheelimg.unpack(world.addr, repo, "@" + run.record["patched_digest"], "amd64", tmp_path / "p")
    so = list((patched / wheelimg.SITE / "fastsum").glob("_native.cpython-311-*.so"))
    assert so, "the patched image holds no compiled extension"
    out = pyroot.chroot(patched, pyroot.PYTHON, "-c", "import fastsum; print(fastsum.add(40, 2))").stdout
    assert out == "42\n", f"the extension did not run in the patched image: {out!r}"
    assert wheelrun.served(world.addr, repo) != pushed["digest"]
