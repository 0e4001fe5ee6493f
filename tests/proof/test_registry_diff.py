"""`diff` patches applied by `runner-patch apply` to images in a real registry (distribution),
checked with tools this project did not write (skopeo, umoci, GNU patch, CPython).

- An image holding the real vLLM 0.29.0 connector files gets `patches/two-file-demo` (two
  files changed, one created): what umoci unpacks from the patched image is byte-for-byte what
  GNU `patch -p1` makes of the original tree; a re-run says already-patched; a diff whose
  context does not match is refused and nothing is pushed.
- Stale bytecode below the layer that holds a patched module (an unchecked-hash `.pyc`, which
  CPython loads whatever the source says) is made unloadable: importing the module from the
  unpacked rootfs with PYTHONDONTWRITEBYTECODE=1 runs the patched source.
"""
from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import registry as fixture_registry
from imagekit import manifest
from imagekit.digest import sha256 as sha
from imagekit.layer import Layer
from imagekit.media import OCI_CONFIG, OCI_LAYER, OCI_MANIFEST
from imagekit.registry import Client
from tests.proof import proofutil as pu
from tests.proof import releases

HERE = Path(__file__).resolve().parent
TWO_FILE = HERE / "patches" / "two-file-demo"
SITE = "usr/local/lib/python3.12/dist-packages"
CONNECTORS = "vllm/distributed/kv_transfer/kv_connector/v1"
TAG = "cuda12.9-vllm0.29.0"

@pytest.fixture()
def registry(tmp_path):
    addr, _ = fixture_registry.start(tmp_path / "registry")
    try:
        yield addr
    finally:
        fixture_registry.stop(tmp_path / "registry")


def push_image(addr: str, repo: str, tag: str, layers: list[dict[str, bytes]]) -> str:
    """Pushes one linux/amd64 OCI image whose layers hold these regular files (parents implied);
    returns the manifest digest the registry serves, as skopeo reads it."""
    reg = Client(addr, repo)
    built = [Layer(f"layer {i}").add((path, "file", data) for path, data in files.items()).build()
             for i, files in enumerate(layers)]
    for b in built:
        reg.push_blob(b["blob"])
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [b["diff_id"] for b in built]},
        "history": [{"created_by": f"layer {i}"} for i in range(len(layers))],
    }).encode()
    reg.push_blob(config)
    doc = manifest.image_manifest(OCI_MANIFEST, manifest.descriptor(OCI_CONFIG, config),
                                  [manifest.descriptor(OCI_LAYER, b["blob"]) for b in built])
    reg.put_manifest(tag, manifest.dump(doc, docker_json=False), OCI_MANIFEST)
    reg.close()
    return served(addr, repo, tag)


def served(addr: str, repo: str, tag: str) -> str:
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                          f"docker://{addr}/{repo}:{tag}"], check=True, capture_output=True).stdout
    return sha(raw)


def unpack(addr: str, repo: str, tag: str, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    layout = into / "layout"
    subprocess.run(["skopeo", "copy", "-q", "--src-tls-verify=false",
                    f"docker://{addr}/{repo}:{tag}", f"oci:{layout}:t"], check=True,
                   capture_output=True)
    subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{layout}:t", str(into / "b")],
                   check=True, capture_output=True)
    return into / "b" / "rootfs"


def apply(addr: str, repo: str, patch: Path, work: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(pu.binary()), "apply", "--backend", "cuda", "--repository", f"{addr}/{repo}",
         "--tag", TAG, "--patch", str(patch), "--digest-map", str(work / f"map-{repo.replace('/', '-')}.json"),
         "--json", "--no-cache", "-q"],
        capture_output=True, text=True, timeout=300)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def vllm_layer() -> dict[str, bytes]:
    src = releases.version_dir("0.29.0") / CONNECTORS
    assert src.is_dir(), f"{src} missing from the release cache"
    files = {f"{SITE}/{CONNECTORS}/{p.relative_to(src)}": p.read_bytes()
             for p in sorted(src.rglob("*.py"))}
    files[f"{SITE}/vllm/__init__.py"] = b""
    files[f"{SITE}/vllm-0.29.0.dist-info/METADATA"] = (
        b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.29.0\n\n")
    return files


def test_two_file_diff_in_a_registry_matches_gnu_patch(release_cache, patch_bin, registry, tmp_path):
    repo = "gpustack/runner"
    original = push_image(registry, repo, TAG, [{"etc/os-release": b"ID=test\n"}, vllm_layer()])
    run = apply(registry, repo, TWO_FILE, tmp_path)
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)["images"][0]
    assert record["outcome"] == "patched", record
    assert record["original_digest"] == original

    # GNU patch on an unpacked copy of the original, against umoci's unpacking of the result.
    before = unpack(registry, repo, TAG, tmp_path / "patched")
    reference = tmp_path / "gnu"
    shutil.copytree(releases.version_dir("0.29.0") / CONNECTORS, reference / SITE / CONNECTORS)
    gnu = subprocess.run(["patch", "-p1", "--fuzz=0", "--batch", "--no-backup-if-mismatch",
                          "-d", str(reference / SITE), "-i", str(TWO_FILE / "fix.patch")],
                         capture_output=True, text=True)
    assert gnu.returncode == 0, gnu.stdout + gnu.stderr
    ours = tree(before / SITE / "vllm")
    theirs = tree(reference / SITE / "vllm")
    for path, data in theirs.items():
        assert ours.get(path) == data, f"{path} differs from GNU patch's"
    assert set(theirs) <= set(ours)

    again = apply(registry, repo, TWO_FILE, tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["images"][0]["outcome"] == "already-patched"


def test_mismatched_context_is_refused_and_nothing_pushed(release_cache, patch_bin, registry,
                                                         tmp_path):
    repo = "gpustack/runner"
    original = push_image(registry, repo, TAG, [vllm_layer()])
    bad = tmp_path / "bad"
    shutil.copytree(TWO_FILE, bad)
    text = (bad / "fix.patch").read_text()
    assert " import enum\n" in text
    (bad / "fix.patch").write_text(text.replace(" import enum\n", " import enum  # changed\n", 1))
    storage = sorted(p.name for p in (tmp_path / "registry").rglob("*") if p.is_file())
    run = apply(registry, repo, bad, tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    record = json.loads(run.stdout)["images"][0]
    assert record["outcome"] == "refused" and "no fuzz" in record["reason"], record
    assert served(registry, repo, TAG) == original
    after = sorted(p.name for p in (tmp_path / "registry").rglob("*") if p.is_file())
    assert after == storage, "nothing was pushed"


def _import_probe(site: Path) -> str:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(site))
    out = subprocess.run([sys.executable, "-c", "import probe.mod; print(probe.mod.VALUE)"],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize("where", ["versioned", "unversioned"])
def test_bytecode_below_the_patched_layer_is_made_unloadable(patch_bin, registry, tmp_path, where):
    py = f"python3.{sys.version_info.minor}"
    site = f"usr/lib/{py}/site-packages" if where == "versioned" else "opt/app"
    src = tmp_path / "src"
    (src / "probe").mkdir(parents=True)
    (src / "probe" / "mod.py").write_text("VALUE = 'pyc'\n")
    cache_tag = sys.implementation.cache_tag
    pyc = src / "probe" / "__pycache__" / f"mod.{cache_tag}.pyc"
    py_compile.compile(str(src / "probe" / "mod.py"), cfile=str(pyc), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    lower = {f"{site}/probe/__pycache__/mod.{cache_tag}.pyc": pyc.read_bytes()}
    upper = {f"{site}/probe/__init__.py": b"", f"{site}/probe/mod.py": b"VALUE = 'old'\n"}
    repo = f"probe/{where}"
    push_image(registry, repo, TAG, [lower, upper])

    original = unpack(registry, repo, TAG, tmp_path / "orig")
    assert _import_probe(original / site) == "pyc", "CPython loads the lower pyc as it is"

    patch = tmp_path / "probe-fix"
    patch.mkdir()
    (patch / "patch.toml").write_text('id = "probe-fix"\nkind = "diff"\ntitle = "t"\n'
                                      'package = "probe"\ndiff = "fix.patch"\n')
    (patch / "fix.patch").write_text("--- a/probe/mod.py\n+++ b/probe/mod.py\n@@ -1 +1 @@\n"
                                     "-VALUE = 'old'\n+VALUE = 'new'\n")
    run = apply(registry, repo, patch, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    patched = unpack(registry, repo, TAG, tmp_path / "patched")
    assert _import_probe(patched / site) == "new"
