"""containerd as a judge of what runner-patch writes, beyond the post operations: stale bytecode
is hidden without phantoms, and the layers it would refuse to write are the ones containerd
cannot unpack.

- An image without `__pycache__` whose module is placed by a `files` patch (a walk of every
  layer: what is there is known) shows no unreadable entry under overlayfs; a `diff` by package
  whose walk stops before the bottom hides the three names of the image's one interpreter (the
  version a lower layer names), not the 21 of CPython 3.8-3.14; a stale `.pyc` in a layer below
  the module is hidden, with no unreadable entry (its `__pycache__` is there).
- A whiteout listed after a file of the same path in one layer: containerd's overlayfs
  snapshotter refuses the layer (the judge fails, as it must); `layer.rs` refuses to build one.
"""
from __future__ import annotations

import io
import json
import tarfile

import pytest

from fixtures import registry as fixture_registry
from imagekit import manifest
from imagekit.digest import sha256
from imagekit.layer import Layer, gzip_bytes
from imagekit.media import OCI_CONFIG, OCI_LAYER, OCI_MANIFEST
from imagekit.registry import Client
from tests.proof import postops as po
from tests.support.containerd import Containerd, ContainerdError

TAG = "cuda12.9-vllm0.27.1"
MODULE = "opt/app/probe/mod.py"
CACHE = "opt/app/probe/__pycache__"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    d = tmp_path_factory.mktemp("registry")
    addr, _ = fixture_registry.start(d)
    try:
        yield addr
    finally:
        fixture_registry.stop(d)


@pytest.fixture(scope="module")
def ctd():
    with Containerd() as c:
        yield c


def probe_patches(tmp_path):
    """A `files` patch placing the module, and a `diff` by package rewriting it."""
    files = tmp_path / "place"
    files.mkdir()
    (files / "mod.py").write_text("VALUE = 'placed'\n")
    (files / "patch.toml").write_text('id = "place"\nkind = "files"\ntitle = "t"\n[[files]]\n'
                                      f'path = "/{MODULE}"\nsource = "mod.py"\nmode = 0o644\n')
    diff = tmp_path / "diff"
    diff.mkdir()
    (diff / "patch.toml").write_text('id = "probe-fix"\nkind = "diff"\ntitle = "t"\npackage = "probe"\n'
                                     'diff = "fix.patch"\n')
    (diff / "fix.patch").write_text("--- a/probe/mod.py\n+++ b/probe/mod.py\n@@ -1 +1 @@\n"
                                    "-VALUE = 'old'\n+VALUE = 'new'\n")
    return files, diff


def probe_image(addr, repo, stale_pyc: bool):
    """Bottom to top: an OS layer (a stale `.pyc` of the module in it, or none), CPython 3.11,
    the module (no `__pycache__`)."""
    def layers(_p):
        os_layer = Layer("os").file("etc/os-release", b"ID=test\n")
        if stale_pyc:
            os_layer.file(f"{CACHE}/mod.cpython-311.pyc", b"unchecked-hash bytecode of an older mod.py")
        probe = (Layer("probe").file("opt/app/probe/__init__.py", b"")
                 .file(MODULE, b"VALUE = 'old'\n"))
        return [os_layer, po.python_layer(11), probe]
    return po.push_image(addr, repo, TAG, layers, "oci")["digest"]


def test_a_walk_of_every_layer_leaves_no_phantom(registry, ctd, tmp_path):
    place, _ = probe_patches(tmp_path)
    probe_image(registry, "probe/place", stale_pyc=False)
    record = po.apply(registry, "probe/place", TAG, "cuda", [place], tmp_path / "map.json")
    assert record["outcome"] == "patched", record
    po.judge(ctd, registry, "probe/place", TAG,
             {f"/{MODULE}": {"sha256": po.sha(b"VALUE = 'placed'\n"), "mode": 0o644}}, tmp=tmp_path)


def test_a_walk_that_stops_hides_only_its_interpreters_names(registry, ctd, tmp_path):
    _, diff = probe_patches(tmp_path)
    probe_image(registry, "probe/diff", stale_pyc=False)
    record = po.apply(registry, "probe/diff", TAG, "cuda", [diff], tmp_path / "map.json")
    assert record["outcome"] == "patched", record
    phantoms = [f"{CACHE}/mod.cpython-311{opt}.pyc" for opt in ("", ".opt-1", ".opt-2")]
    po.judge(ctd, registry, "probe/diff", TAG,
             {f"/{MODULE}": {"sha256": po.sha(b"VALUE = 'new'\n"), "mode": 0o644}},
             unreadable_ok={"overlayfs": phantoms}, tmp=tmp_path)


def test_a_stale_pyc_below_the_module_is_hidden_without_phantoms(registry, ctd, tmp_path):
    _, diff = probe_patches(tmp_path)
    probe_image(registry, "probe/stale", stale_pyc=True)
    record = po.apply(registry, "probe/stale", TAG, "cuda", [diff], tmp_path / "map.json")
    assert record["outcome"] == "patched", record
    po.judge(ctd, registry, "probe/stale", TAG,
             {f"/{MODULE}": {"sha256": po.sha(b"VALUE = 'new'\n"), "mode": 0o644},
              f"/{CACHE}/mod.cpython-311.pyc": None}, tmp=tmp_path)


def push_conflict(addr, repo):
    """A layer holding `opt/x` and then `opt/.wh.x`, which runner-patch never writes."""
    base = Layer("base").file("opt/x", b"old\n").build()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in (("opt/x", b"new\n"), ("opt/.wh.x", b"")):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime = len(data), 1
            tf.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue()
    blob = gzip_bytes(raw)
    reg = Client(addr, repo)
    for b in (base["blob"], blob):
        reg.push_blob(b)
    cfg = json.dumps({"architecture": "amd64", "os": "linux",
                      "rootfs": {"type": "layers", "diff_ids": [base["diff_id"], sha256(raw)]}}).encode()
    reg.push_blob(cfg)
    doc = manifest.image_manifest(OCI_MANIFEST, manifest.descriptor(OCI_CONFIG, cfg),
                                  [manifest.descriptor(OCI_LAYER, base["blob"]),
                                   manifest.descriptor(OCI_LAYER, blob)])
    reg.put_manifest("t", manifest.dump(doc, docker_json=False), OCI_MANIFEST)
    reg.close()


def test_containerd_refuses_a_whiteout_after_a_file_of_the_same_path(registry, ctd):
    push_conflict(registry, "probe/conflict")
    with pytest.raises(ContainerdError, match="failed to convert whiteout file"):
        ctd.pull(f"{registry}/probe/conflict:t", "overlayfs", ["linux/amd64"])
