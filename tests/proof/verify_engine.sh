#!/usr/bin/env bash
# The real-engine proof (make verify-engine): the real vLLM 0.29.0 file goes into a fixture runner
# image in a local registry, runner-patch patches the image, the patched file is taken back out of
# the registry with skopeo + umoci (not from the patcher's memory), and the real vLLM 0.29.0
# KVConnectorProm is driven with MooncakeConnector + MooncakeStoreConnector statistics:
# the original file must abort with the reported AssertionError, the patched one must not.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${RUNNER_PATCH_BIN:-target/release/runner-patch}"
VERSION=0.29.0

PY=$(bash tests/proof/engine_venv.sh)
CACHE=$(python3 -m tests.proof.releases fetch "$VERSION")
ORIGINAL="$CACHE/$VERSION/vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py"
[ -f "$ORIGINAL" ] || { echo "verify-engine: $ORIGINAL missing after fetch" >&2; exit 2; }

WORK=$(mktemp -d)
cleanup() { python3 -m fixtures.registry stop --dir "$WORK/registry" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
ADDR=$(python3 -m fixtures.registry start --dir "$WORK/registry")
TAG="cuda12.9-vllm$VERSION"
python3 -m fixtures.build --registry "$ADDR" --only "$TAG" --vllm-file "$VERSION=$ORIGINAL" --summary "$WORK/fixtures.json" >/dev/null

"$BIN" -q apply --backend cuda --repository "$ADDR/gpustack/runner" --tag "$TAG" --digest-map "$WORK/map.json" >/dev/null
python3 - "$WORK/map.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
img = m["images"][0]
assert img["outcome"] == "patched", img
assert all(p["vllm_version"] == "0.29.0" for p in img["platforms"]), img
PY

skopeo copy -q --src-tls-verify=false --override-os linux --override-arch amd64 \
    "docker://$ADDR/gpustack/runner:$TAG" "oci:$WORK/layout:t"
umoci unpack --rootless --image "$WORK/layout:t" "$WORK/bundle" >/dev/null
FILE=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['images'][0]['platforms'][0]['file'])" "$WORK/map.json")
PATCHED="$WORK/bundle/rootfs$FILE"

echo "== original vLLM $VERSION file (expect the engine abort)"
"$PY" tests/proof/engine_check.py "$ORIGINAL" --expect abort
echo "== file taken out of the patched image in the registry (expect no abort, metrics flowing)"
"$PY" tests/proof/engine_check.py "$PATCHED" --expect ok
echo "verify-engine: passed"
