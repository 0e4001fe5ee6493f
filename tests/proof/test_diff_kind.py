"""The `diff` patch kind on the real vLLM files of every release, against GNU `patch -p1`.

- `patches/two-file-demo` (a git diff made against vLLM 0.29.0: two hunks in base.py, the observe()
  fix in multi_connector.py, one created file) is applied by `runner-patch patch-dir` to an unpacked
  tree of each release and by GNU `patch -p1 --fuzz=0` to a copy: where GNU patch applies it, the
  two trees are byte-for-byte equal and the offsets reported agree; where GNU patch refuses, the tool
  refuses and writes nothing. A re-run says already-patched; a changed context line or a half-applied
  tree is refused and nothing is written.
- The built-in fix written a second way (`examples/patches/observe-diff-data` and `-plain`, one
  diff per call form) gives on every affected release exactly the bytes the `shapes` patch gives,
  and that file passes the behavioural proof of test_behaviour.py.
"""
from __future__ import annotations

import filecmp
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.proof import proofutil as pu
from tests.proof import releases
from tests.proof.test_behaviour import build, expected_child_arg, load, payload
from tests.proof.test_releases import AFFECTED, expected_arg

HERE = Path(__file__).resolve().parent
TWO_FILE = HERE / "patches" / "two-file-demo"
OBSERVE = {pu.ARG_DATA: pu.REPO_ROOT / "examples/patches/observe-diff-data",
           pu.ARG_PLAIN: pu.REPO_ROOT / "examples/patches/observe-diff-plain"}
SITE = "usr/local/lib/python3.12/dist-packages"
CONNECTORS = "vllm/distributed/kv_transfer/kv_connector/v1"


def make_rootfs(dest: Path, version: str) -> Path:
    """An unpacked-image-like tree holding the release's connector files; returns the rootfs."""
    src = releases.version_dir(version) / CONNECTORS
    assert src.is_dir(), f"{src} missing from the cache"
    shutil.copytree(src, dest / SITE / CONNECTORS)
    return dest


def patch_dir(root: Path, *patches: Path | str) -> tuple[int, dict | None, str]:
    cmd = [str(pu.binary()), "patch-dir", str(root), "--json"]
    for p in patches:
        cmd += ["--patch", str(p)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = None
    return proc.returncode, report, proc.stderr


def gnu_patch(root: Path, diff: Path) -> tuple[int, str]:
    proc = subprocess.run(
        ["patch", "-p1", "--fuzz=0", "--forward", "--batch", "--no-backup-if-mismatch",
         "--reject-file=-", "-d", str(root / SITE), "-i", str(diff)],
        capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


def gnu_offsets(output: str) -> set[tuple[str, int, int]]:
    """(file, hunk, offset) for every hunk GNU patch placed away from its line."""
    found, current = set(), None
    for line in output.splitlines():
        if line.startswith("patching file "):
            current = line[len("patching file "):].strip()
        m = re.match(r"Hunk #(\d+) succeeded at \d+ \(offset (-?\d+) lines?\)", line)
        if m:
            found.add((current, int(m.group(1)), int(m.group(2))))
    return found


def tool_offsets(report: dict) -> set[tuple[str, int, int]]:
    found = set()
    for note in report["patches"][0]["notes"]:
        m = re.match(r"(\S+): hunk #(\d+) applied at offset ([+-]\d+) lines", note)
        if m:
            found.add((m.group(1), int(m.group(2)), int(m.group(3))))
    return found


def same_tree(a: Path, b: Path) -> list[str]:
    """Paths that differ between two trees (content or presence); empty when equal."""
    diffs = []
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    diffs += [f"only in one: {p}" for p in sorted(files_a ^ files_b)]
    for p in sorted(files_a & files_b):
        if not filecmp.cmp(a / p, b / p, shallow=False):
            diffs.append(f"differs: {p}")
    return diffs


@pytest.mark.parametrize("version", releases.VERSIONS)
def test_two_file_diff_matches_gnu_patch(release_cache, patch_bin, tmp_path, version):
    ours = make_rootfs(tmp_path / "ours", version)
    gnu = make_rootfs(tmp_path / "gnu", version)
    pristine = make_rootfs(tmp_path / "pristine", version)
    rc, report, err = patch_dir(ours, TWO_FILE)
    assert report is not None, err
    outcome = report["patches"][0]["outcome"]
    grc, gout = gnu_patch(gnu, TWO_FILE / "fix.patch")
    if grc == 0:
        assert (rc, outcome) == (0, "patched"), report
        assert same_tree(ours, gnu) == [], gout
        assert tool_offsets(report) == gnu_offsets(gout), (report, gout)
        # a re-run finds every file patched and writes nothing
        rc2, report2, _ = patch_dir(ours, TWO_FILE)
        assert (rc2, report2["patches"][0]["outcome"]) == (0, "already-patched"), report2
        assert same_tree(ours, gnu) == []
    else:
        assert (rc, outcome) == (1, "refused"), (report, gout)
        assert same_tree(ours, pristine) == [], "a refused patch wrote something"
    # releases with 0.29.0's base.py imports and call form must apply: the test is not vacuous
    if (0, 21, 0) <= releases.version_key(version) <= (0, 29, 0):
        assert grc == 0 and outcome == "patched", (version, gout, report)


def test_offsets_are_reported_like_gnu_patch(release_cache, patch_bin, tmp_path):
    """0.22.0 has the observe block one line lower than 0.29.0: both tools say so."""
    ours = make_rootfs(tmp_path / "ours", "0.22.0")
    gnu = make_rootfs(tmp_path / "gnu", "0.22.0")
    _, report, _ = patch_dir(ours, TWO_FILE)
    _, gout = gnu_patch(gnu, TWO_FILE / "fix.patch")
    assert (f"{CONNECTORS}/multi_connector.py", 1, 1) in tool_offsets(report), report
    assert tool_offsets(report) == gnu_offsets(gout)


def test_mismatching_context_is_refused_and_nothing_written(release_cache, patch_bin, tmp_path):
    root = make_rootfs(tmp_path / "root", "0.29.0")
    base = root / SITE / CONNECTORS / "base.py"
    base.write_text(base.read_text().replace("import enum\n", "import enum  # local change\n", 1))
    before = make_rootfs(tmp_path / "before", "0.29.0")
    shutil.copy(base, before / SITE / CONNECTORS / "base.py")
    rc, report, _ = patch_dir(root, TWO_FILE)
    assert rc == 1, report
    assert report["patches"][0]["outcome"] == "refused"
    assert "base.py: hunk #1" in report["patches"][0]["reason"]
    assert same_tree(root, before) == [], "multi_connector.py would apply, but nothing may be written"
    gnu = tmp_path / "gnu"
    shutil.copytree(before, gnu)
    grc, gout = gnu_patch(gnu, TWO_FILE / "fix.patch")
    assert grc != 0 and "FAILED" in gout, gout


def test_half_applied_tree_is_refused(release_cache, patch_bin, tmp_path):
    root = make_rootfs(tmp_path / "root", "0.29.0")
    created = root / SITE / CONNECTORS / "runner_patch_probe.py"
    created.write_text('"""Created by a runner-patch diff patch."""\n\nPROBE = "runner-patch two-file-demo"\n')
    rc, report, _ = patch_dir(root, TWO_FILE)
    assert rc == 1
    assert "partly applied" in report["patches"][0]["reason"], report


@pytest.mark.parametrize("version", AFFECTED)
def test_observe_as_diff_equals_shapes_and_survives(release_cache, patch_bin, tmp_path, version):
    arg = expected_arg(version)
    other = pu.ARG_PLAIN if arg == pu.ARG_DATA else pu.ARG_DATA
    root = make_rootfs(tmp_path / "root", version)
    target = root / SITE / CONNECTORS / "multi_connector.py"
    original = target.read_bytes()
    # the other call form's diff does not fit: refused, nothing written
    rc, report, err = patch_dir(root, OBSERVE[other])
    assert rc == 1 and report["patches"][0]["outcome"] == "refused", (report, err)
    assert target.read_bytes() == original
    rc, report, err = patch_dir(root, OBSERVE[arg])
    assert rc == 0 and report["patches"][0]["outcome"] == "patched", (report, err)
    shapes = pu.run_patch_file(releases.multi_connector_path(version), tmp_path / "shapes.py")
    assert shapes.output is not None, shapes.describe()
    assert target.read_bytes() == shapes.output, "the diff and the shapes patch differ"
    # the shapes engine recognises the diff's result as its own, and the diff recognises it back
    again = pu.run_patch_file(target)
    assert again.report["outcome"] == "already-patched", again.describe()
    rc, report, _ = patch_dir(root, OBSERVE[arg])
    assert (rc, report["patches"][0]["outcome"]) == (0, "already-patched"), report
    # the shapes engine behind the same interface (patch-dir, no --patch: the built-in patch)
    fresh = make_rootfs(tmp_path / "fresh", version)
    rc, report, err = patch_dir(fresh)
    assert (rc, report["patches"][0]["outcome"]) == (0, "patched"), (report, err)
    assert report["patches"][0]["kind"] == "shapes"
    assert (fresh / SITE / CONNECTORS / "multi_connector.py").read_bytes() == shapes.output
    # the behavioural proof of test_behaviour.py
    prom, recorded = build(load(target))
    data = payload(arg)
    prom.observe(data, 3)
    assert len(recorded) == 1, recorded
    got, engine_idx = recorded[0]
    assert got is expected_child_arg(data["MooncakeStoreConnector"], arg)
    assert engine_idx == 3
    recorded.clear()
    prom.observe({"MooncakeConnector": data["MooncakeConnector"]}, 0)
    assert recorded == []
