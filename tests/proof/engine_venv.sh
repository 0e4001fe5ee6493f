#!/usr/bin/env bash
# Create (once) a venv with the real vLLM 0.29.0 for engine_check.py and print its python path.
# Cached at ${RUNNER_PATCH_CACHE:-$HOME/.cache/runner-patch}/venv-vllm-0.29.0 with a done-marker.
# CPU-only is fine: the check only builds the Prometheus metrics objects (~8 GB, a few minutes).
set -euo pipefail
VLLM_VERSION="${VLLM_VERSION:-0.29.0}"
CACHE="${RUNNER_PATCH_CACHE:-$HOME/.cache/runner-patch}"
VENV="$CACHE/venv-vllm-$VLLM_VERSION"
MARKER="$VENV/.runner-patch-done"
PYTHON="${PYTHON:-python3}"

if [[ ! -f "$MARKER" ]]; then
    rm -rf "$VENV"
    mkdir -p "$CACHE"
    echo "engine_venv: creating $VENV (vllm==$VLLM_VERSION)" >&2
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "vllm==$VLLM_VERSION" >&2
    "$VENV/bin/python" -c "import vllm, prometheus_client; assert vllm.__version__.startswith('$VLLM_VERSION'), vllm.__version__" >&2
    touch "$MARKER"
fi
echo "$VENV/bin/python"
