#!/usr/bin/env bash
# The main job on an embedded default: a local registry seeded with fixture runner images, then
# `runner-patch apply --backend cuda` against it, then the digest map it wrote.
# The registry keeps running (state in .demo/) so plan/apply/verify/rollback can be tried by hand;
# `make demo-stop` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=.demo
python3 -m fixtures.registry stop --dir "$DEMO" >/dev/null 2>&1 || true
rm -rf "$DEMO"
mkdir -p "$DEMO"
ADDR=$(python3 -m fixtures.registry start --dir "$DEMO")
REPO="$ADDR/gpustack/runner"
echo "== local registry on $ADDR (storage in $DEMO/storage)"
python3 -m fixtures.build --registry "$ADDR" --repository gpustack/runner \
    --only cuda12.9-vllm0.27.1,cuda13.0-vllm0.30.0,cuda13.0-vllm0.33.0,rocm7.2-vllm0.25.1,cann9.0-910b-vllm0.20.2 \
    --summary "$DEMO/fixtures.json" >/dev/null
echo "== seeded $REPO with cuda12.9-vllm0.27.1, cuda13.0-vllm0.30.0, cuda13.0-vllm0.33.0, rocm7.2-vllm0.25.1, cann9.0-910b-vllm0.20.2"
BIN=target/release/runner-patch
echo "== $BIN apply --backend cuda --repository $REPO --digest-map $DEMO/runner-patch-manifest.json"
set +e
"$BIN" apply --backend cuda --repository "$REPO" --digest-map "$DEMO/runner-patch-manifest.json"
status=$?
set -e
echo "== digest map ($DEMO/runner-patch-manifest.json)"
cat "$DEMO/runner-patch-manifest.json"
echo "== apply exited $status; the registry is still up at $ADDR (make demo-stop stops it). Try:"
echo "   # check every patched image against its original"
echo "   $BIN verify --digest-map $DEMO/runner-patch-manifest.json"
echo "   # plan again: already-patched, nothing to do"
echo "   $BIN plan --backend cuda --repository $REPO"
echo "   # put every moved tag back on its original digest"
echo "   $BIN rollback --digest-map $DEMO/runner-patch-manifest.json"
echo "   # what apply --backend rocm would do"
echo "   $BIN plan --backend rocm --repository $REPO"
exit "$status"
