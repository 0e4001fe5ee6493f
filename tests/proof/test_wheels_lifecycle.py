"""A `wheels` patch through its life (issue 18): `plan` says which wheel goes over which
installed version and pushes nothing; `apply` patches both platforms of a Docker list; a re-run
is `already-patched` and writes nothing to the registry's storage; the same image elsewhere gets
the same layers (reproducible); `verify` passes; an image
whose wheels layer has one file changed (the layer rebuilt with other bytes for it, the config's
diff_id and the manifest fixed up so the image is otherwise valid) fails `verify`, which names
that file; `rollback` puts the original digest back.
"""
from __future__ import annotations

import gzip
import io
import json
import re
import tarfile

import pytest

from imagekit.digest import sha256
from imagekit.media import INDEXES
from imagekit.registry import Client
from tests.proof import pylock, wheelrun, wheelset

REPO = "proof/wheels-life"
TAMPERED = "cuda12.8-vllm0.11.3"
CHANGED = "dist-packages/demo_pkg/cli.py"


@pytest.fixture(scope="module")
def life(wheels_world, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("life")
    original = wheels_world.layers.push(wheels_world.addr, REPO, wheelrun.TAG, arches=("amd64", "arm64"),
                                        style="docker")
    folder = pylock.folder(tmp / "upgrade", "life-upgrade", [wheelset.demo_pkg_2()], remove=["nsshare-a"])
    return {"tmp": tmp, "original": original["digest"], "folder": folder, "map": tmp / "map.json"}


def test_plan_names_the_wheel_and_pushes_nothing(wheels_world, life):
    before = wheelrun.storage(wheels_world.registry_dir)
    run = wheelrun.plan(wheels_world.addr, REPO, life["folder"])
    assert run.code == 0, run.describe()
    assert wheelrun.storage(wheels_world.registry_dir) == before, "plan pushed something"
    rec = run.record
    assert rec["outcome"] == "patched" and rec["bytes_to_push"] > 0, run.describe()
    for plat in rec["platforms"]:
        text = json.dumps(plat)
        assert "demo_pkg-2.0-py3-none-any.whl" in text and re.search(r'demo[-_]pkg[^"]*1\.0', text), \
            f"plan of {plat['platform']} does not name the wheel over the installed demo-pkg 1.0: {text}"
        assert re.search(r"nsshare[-_]a", text), f"plan of {plat['platform']} does not name the removal: {text}"
        assert plat["bytes_to_push"] > 0


def test_apply_then_rerun_is_already_patched(wheels_world, life):
    run = wheelrun.apply(wheels_world.addr, REPO, life["folder"], life["map"])
    assert run.record["outcome"] == "patched", run.describe()
    assert {p["platform"] for p in run.record["platforms"]} == {"linux/amd64", "linux/arm64/v8"}
    life["patched"] = run.record["patched_digest"]
    life["layers"] = {p["platform"]: p["added_layer"]["digest"] for p in run.record["platforms"]}
    before = wheelrun.storage(wheels_world.registry_dir)
    again = wheelrun.apply(wheels_world.addr, REPO, life["folder"], life["tmp"] / "map-again.json")
    assert again.record["outcome"] == "already-patched", again.describe()
    planned = wheelrun.plan(wheels_world.addr, REPO, life["folder"])
    assert planned.code == 0 and planned.record["outcome"] == "already-patched", planned.describe()
    assert wheelrun.storage(wheels_world.registry_dir) == before, "a re-run pushed something"
    assert wheelrun.served(wheels_world.addr, REPO) == life["patched"]


def test_same_lock_on_the_same_image_gives_the_same_layer(wheels_world, life):
    """Reproducible: the same image in another repository gets layers of the same digests."""
    patched(life)
    other = "proof/wheels-life-again"
    wheels_world.layers.push(wheels_world.addr, other, wheelrun.TAG, arches=("amd64", "arm64"), style="docker")
    run = wheelrun.apply(wheels_world.addr, other, life["folder"], life["tmp"] / "map-other.json")
    assert run.record["outcome"] == "patched", run.describe()
    assert {p["platform"]: p["added_layer"]["digest"] for p in run.record["platforms"]} == life["layers"]


def test_verify_passes(wheels_world, life):
    patched(life)
    run = wheelrun.verify(life["folder"], life["map"])
    assert run.code == 0, run.describe()
    by_ref = wheelrun.verify(life["folder"], refs=[f"{wheels_world.addr}/{REPO}:{wheelrun.TAG}"])
    assert by_ref.code == 0, f"verify by reference, without the map: {by_ref.describe()}"


def patched(life) -> str:
    assert "patched" in life, "apply did not patch the image (test_apply_then_rerun_is_already_patched says why)"
    return life["patched"]


def tamper(addr: str, repo: str, ref: str, old: bytes = b"demo-pkg 2.0", new: bytes = b"demo-pkg 6.6") -> str:
    """Pushes, as REPO:TAMPERED, the amd64 image of REF with OLD replaced by NEW (as long) in
    CHANGED in the top layer, every other entry and header as it was; returns the file's path
    in the layer."""
    client = Client(addr, repo)
    try:
        mt, body = client.manifest(ref)
        doc = json.loads(body)
        if mt in INDEXES:
            (child,) = [m for m in doc["manifests"] if m.get("platform", {}).get("architecture") == "amd64"]
            mt, body = client.manifest(child["digest"])
            doc = json.loads(body)
        top = doc["layers"][-1]
        raw = gzip.decompress(client.blob(top["digest"]))
        out, hit = io.BytesIO(), None
        with tarfile.open(fileobj=io.BytesIO(raw)) as src, tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
            for m in src.getmembers():
                data = src.extractfile(m).read() if m.isfile() else None
                if m.isfile() and m.name.endswith(CHANGED):
                    hit, data = m.name, data.replace(old, new)
                dst.addfile(m, io.BytesIO(data) if data is not None else None)
        assert hit, f"the patched image's top layer has no {CHANGED}"
        new_raw = out.getvalue()
        blob = gzip.compress(new_raw, mtime=0)
        client.push_blob(blob)
        config = json.loads(client.blob(doc["config"]["digest"]))
        config["rootfs"]["diff_ids"][-1] = sha256(new_raw)
        cfg = json.dumps(config, separators=(",", ":")).encode()
        client.push_blob(cfg)
        doc["config"].update(digest=sha256(cfg), size=len(cfg))
        top.update(digest=sha256(blob), size=len(blob))
        client.put_manifest(TAMPERED, json.dumps(doc, indent=3).encode(), mt)
        return hit
    finally:
        client.close()


def test_verify_names_a_tampered_file(wheels_world, life):
    path = tamper(wheels_world.addr, REPO, patched(life))
    run = wheelrun.verify(life["folder"], refs=[f"{wheels_world.addr}/{REPO}:{TAMPERED}"])
    assert run.code == 1, f"verify of an image with {path} changed: {run.describe()}"
    assert "demo_pkg/cli.py" in run.stdout + run.stderr, f"verify does not name the file: {run.describe()}"


def test_rollback_restores_the_original(wheels_world, life):
    patched(life)
    run = wheelrun.rollback(life["map"])
    assert run.code == 0, run.describe()
    assert wheelrun.served(wheels_world.addr, REPO) == life["original"]
