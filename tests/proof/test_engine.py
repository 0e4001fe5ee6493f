"""engine_check.py against the real vLLM 0.29.0 (only when its venv exists: see engine_venv.sh)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.proof import proofutil as pu
from tests.proof import releases

HERE = Path(__file__).resolve().parent
VENV = Path(os.environ.get("RUNNER_PATCH_CACHE") or Path.home() / ".cache" / "runner-patch") \
    / "venv-vllm-0.29.0"
pytestmark = pytest.mark.skipif(not (VENV / ".runner-patch-done").is_file(),
                                reason="no vLLM 0.29.0 venv: run tests/proof/engine_venv.sh first")


def engine_check(path: Path, expect: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV / "bin" / "python"), str(HERE / "engine_check.py"), str(path),
                           "--expect", expect], capture_output=True, text=True, timeout=600)


def test_original_aborts(release_cache):
    run = engine_check(releases.multi_connector_path("0.29.0"), "abort")
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]


def test_reference_patch_ok_and_not_abort(release_cache, tmp_path):
    ref = tmp_path / "multi_connector.py"
    ref.write_text(pu.reference_patch(releases.multi_connector_path("0.29.0").read_text()))
    run = engine_check(ref, "ok")
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert engine_check(ref, "abort").returncode == 1  # the check can fail


def test_binary_patch_ok(release_cache, patch_bin, tmp_path):
    out = tmp_path / "multi_connector.py"
    pu.run_patch_file(releases.multi_connector_path("0.29.0"), out)
    run = engine_check(out, "ok")
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
