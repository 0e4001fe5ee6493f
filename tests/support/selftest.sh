#!/usr/bin/env bash
# Self-test of tests/support against the real distribution registry (docker-registry 2.8.x) and
# skopeo: htpasswd auth, token auth (push/pull, denied scopes, x5c and kid JWT headers), and every
# fault kind of fault_proxy.py. Everything on 127.0.0.1, in a temporary directory, in < 60 s.
# Exits non-zero on the first failure. KEEP=1 keeps the temporary directory.
set -euo pipefail
# The support tools are modules of the repository (`python3 -m tests.support.NAME`, from its root).
cd "$(dirname "$0")/../.."
T=$(mktemp -d)
PIDS=()
cleanup() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$rc" != 0 ]; then
    echo "selftest FAILED (rc=$rc); logs:" >&2
    tail -n 5 "$T"/*.err "$T"/*/registry.err 2>/dev/null | cut -c1-400 >&2 || true
  fi
  [ -n "${KEEP:-}" ] && echo "kept $T" >&2 || rm -rf "$T"
  exit "$rc"
}
trap cleanup EXIT
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
jget() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$1" "$2"; }

# daemon NAME CMD...: start CMD, wait for its JSON ready-line in $T/NAME.ready
daemon() {
  local name=$1; shift
  "$@" >"$T/$name.ready" 2>"$T/$name.err" </dev/null &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s "$T/$name.ready" ] && return 0; sleep 0.1; done
  fail "$name: no ready line"
}
# registry DIR: serve DIR/config.yml, wait until /v2/ answers
registry() {
  local addr
  addr=$(python3 -c 'import re,sys; print(re.search(r"addr: \"([^\"]+)\"", open(sys.argv[1]).read())[1])' "$1/config.yml")
  docker-registry serve "$1/config.yml" >"$1/registry.out" 2>"$1/registry.err" </dev/null &
  PIDS+=($!)
  for _ in $(seq 100); do curl -s -o /dev/null "http://$addr/v2/" && return 0; sleep 0.1; done
  fail "registry $1 did not start"
}
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

# A one-layer OCI image layout to push.
python3 - "$T/src" <<'PY'
import json, os, sys
from imagekit import manifest, sha256
from imagekit.layer import Layer
from imagekit.media import OCI_CONFIG, OCI_LAYER, OCI_MANIFEST
d = sys.argv[1]; os.makedirs(f"{d}/blobs/sha256")
def put(b):
    open(f"{d}/blobs/sha256/{sha256(b)[7:]}", "wb").write(b); return b
layer = Layer("selftest").file("hello.txt", b"hello from selftest\n" * 4000).build()
put(layer["blob"])
cfg = put(json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers",
          "diff_ids": [layer["diff_id"]]}}).encode())
m = put(manifest.dump(manifest.image_manifest(OCI_MANIFEST, manifest.descriptor(OCI_CONFIG, cfg),
                                              [manifest.descriptor(OCI_LAYER, layer["blob"])]), docker_json=False))
open(f"{d}/oci-layout", "w").write('{"imageLayoutVersion":"1.0.0"}')
open(f"{d}/index.json", "w").write(json.dumps({"schemaVersion": 2, "manifests": [manifest.descriptor(
    OCI_MANIFEST, m, annotations={"org.opencontainers.image.ref.name": "v1"})]}))
PY
SRC="oci:$T/src:v1"
SK=(timeout 30 skopeo --insecure-policy)
MT='application/vnd.oci.image.manifest.v1+json'

echo "== htpasswd"
P=$(free_port); mkdir "$T/ht"
python3 -m tests.support.registry_auth htpasswd --dir "$T/ht" --user alice --password s3cret | grep -q 'htpasswd:' || fail "no snippet"
grep -q '^alice:\$2b\$' "$T/ht/htpasswd" || fail "htpasswd line is not \$2b\$"
python3 -m tests.support.registry_auth config --dir "$T/ht" --port "$P" --auth htpasswd >/dev/null
registry "$T/ht"
[ "$(code "http://127.0.0.1:$P/v2/")" = 401 ] || fail "htpasswd: anonymous not 401"
[ "$(code -u alice:s3cret "http://127.0.0.1:$P/v2/")" = 200 ] || fail "htpasswd: alice not 200"
[ "$(code -u alice:nope "http://127.0.0.1:$P/v2/")" = 401 ] || fail "htpasswd: bad password not 401"
"${SK[@]}" copy -q --dest-tls-verify=false --dest-creds alice:s3cret "$SRC" "docker://127.0.0.1:$P/app/img:v1" \
  || fail "htpasswd: skopeo push"
ok "htpasswd: \$2b\$ bcrypt accepted; 401/200/401; skopeo push with --dest-creds"

echo "== token auth"
mkdir "$T/tok"
daemon tok python3 -m tests.support.token_server --dir "$T/tok" --service reg.test --issuer selftest-issuer \
  --user alice --password s3cret --deny-pull 'secret/*' --deny-push 'readonly/*' --ttl 120
TA=$(jget "$T/tok.ready" addr); REALM=$(jget "$T/tok.ready" realm); CERT=$(jget "$T/tok.ready" rootcert)
P=$(free_port); R="127.0.0.1:$P"
python3 -m tests.support.registry_auth config --dir "$T/tok" --port "$P" --auth token --token-realm "$REALM" \
  --service reg.test --issuer selftest-issuer --rootcert "$CERT" >/dev/null
registry "$T/tok"
curl -s -D "$T/challenge.h" -o /dev/null "http://$R/v2/"
grep -qi "www-authenticate: Bearer realm=\"$REALM\",service=\"reg.test\"" "$T/challenge.h" || fail "token: no Bearer challenge"
"${SK[@]}" copy -q --dest-tls-verify=false --dest-creds alice:s3cret "$SRC" "docker://$R/app/img:v1" || fail "token: push"
"${SK[@]}" copy -q --src-tls-verify=false --dest-tls-verify=false --src-creds alice:s3cret --dest-creds alice:s3cret \
  "docker://$R/app/img:v1" "docker://$R/app/copy:v1" || fail "token: registry-to-registry copy"
"${SK[@]}" copy -q --src-tls-verify=false --src-creds alice:s3cret "docker://$R/app/copy:v1" "dir:$T/pulled" \
  || fail "token: pull"
ok "token (x5c): skopeo push, copy app/img -> app/copy, pull"
python3 - "$T/tok/token.log" <<'PY' || fail "token.log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def has(row, name, act):
    return any(a["name"] == name and act in a["actions"] for a in row.get("access", []))
assert any(has(r, "app/img", "push") for r in rows), "no push grant on app/img"
both = [r for r in rows if has(r, "app/img", "pull") and has(r, "app/copy", "push")]
print(f"ok   token.log: {len(rows)} requests; {len(both)} token(s) held pull on app/img and push on app/copy (mount)")
PY
# Denied pull: a token for secret/img carries no actions; the registry answers 401 insufficient_scope.
TOK=$(curl -sf -u alice:s3cret "http://$TA/token?service=reg.test&scope=repository:secret/img:pull" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
curl -s -D "$T/denied.h" -o "$T/denied.b" -H "Authorization: Bearer $TOK" -H "Accept: $MT" "http://$R/v2/secret/img/manifests/v1"
head -1 "$T/denied.h" | grep -q ' 401' || fail "denied pull: not 401"
grep -qi 'error="insufficient_scope"' "$T/denied.h" || fail "denied pull: no insufficient_scope"
grep -q 'scope="repository:secret/img:pull"' "$T/denied.h" || fail "denied pull: scope missing"
! "${SK[@]}" inspect --raw --tls-verify=false --creds alice:s3cret "docker://$R/secret/img:v1" 2>/dev/null \
  || fail "denied pull: skopeo succeeded"
! "${SK[@]}" copy -q --dest-tls-verify=false --dest-creds alice:s3cret "$SRC" "docker://$R/readonly/img:v1" 2>/dev/null \
  || fail "denied push: skopeo succeeded"
ok "denied pull -> 401 insufficient_scope; denied push -> skopeo fails"
[ "$(code "http://$TA/token?service=reg.test&scope=repository:app/img:pull")" = 200 ] || fail "anonymous token"
[ "$(code -u alice:wrong "http://$TA/token?service=reg.test&scope=repository:app/img:pull")" = 401 ] || fail "bad password"
ATOK=$(curl -s "http://$TA/token?service=reg.test&scope=repository:app/img:pull" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
[ "$(code -H "Authorization: Bearer $ATOK" -H "Accept: $MT" "http://$R/v2/app/img/manifests/v1")" = 401 ] || fail "anonymous pull"
ok "anonymous -> token without access (registry 401); wrong password -> 401 at the token server"
daemon kid python3 -m tests.support.token_server --dir "$T/tok" --service reg.test --issuer selftest-issuer \
  --user alice --password s3cret --jwt-header kid
KTOK=$(curl -sf -u alice:s3cret "http://$(jget "$T/kid.ready" addr)/token?service=reg.test&scope=repository:app/img:pull" |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
[ "$(code -H "Authorization: Bearer $KTOK" -H "Accept: $MT" "http://$R/v2/app/img/manifests/v1")" = 200 ] || fail "kid token"
ok "token (kid, libtrust key id) accepted too"

echo "== fault proxy in front of the token registry (clean plan)"
echo '[]' > "$T/plan-tok.json"
daemon pxt python3 -m tests.support.fault_proxy --upstream "$R" --plan "$T/plan-tok.json" --log "$T/pxt.log"
PXT=$(jget "$T/pxt.ready" addr)
curl -s -D "$T/challenge-px.h" -o /dev/null "http://$PXT/v2/"
cmp -s <(grep -i www-authenticate "$T/challenge.h") <(grep -i www-authenticate "$T/challenge-px.h") \
  || fail "proxy: WWW-Authenticate changed"
"${SK[@]}" copy -q --dest-tls-verify=false --dest-creds alice:s3cret "$SRC" "docker://$PXT/app/viaproxy:v1" \
  || fail "proxy: skopeo push through the proxy"
"${SK[@]}" inspect --raw --tls-verify=false --creds alice:s3cret "docker://$R/app/viaproxy:v1" >/dev/null \
  || fail "proxy: pushed image not in the registry"
grep -q '"method": "PUT"' "$T/pxt.log" || fail "proxy: uploads bypassed the proxy"
ok "WWW-Authenticate unchanged; skopeo push with token auth through the proxy (Location rewritten)"

echo "== fault kinds against a registry without auth"
P=$(free_port); mkdir "$T/plain"
python3 -m tests.support.registry_auth config --dir "$T/plain" --port "$P" --auth none >/dev/null
registry "$T/plain"
echo '[]' > "$T/plan.json"
daemon px python3 -m tests.support.fault_proxy --upstream "127.0.0.1:$P" --plan "$T/plan.json" --log "$T/px.log"
timeout 40 python3 -m tests.support.selftest_faults --registry "127.0.0.1:$P" --proxy "$(jget "$T/px.ready" addr)" \
  --plan "$T/plan.json" --log "$T/px.log"

PX=$(jget "$T/px.ready" addr)
head -c 2097152 /dev/urandom > "$T/big"
DIG="sha256:$(sha256sum "$T/big" | cut -d' ' -f1)"
LOC=$(curl -s -D - -o /dev/null -X POST "http://$PX/v2/big/blobs/uploads/" | tr -d '\r' | awk 'tolower($1)=="location:"{print $2}')
[ "$(curl -sv -T "$T/big" -H 'Content-Type: application/octet-stream' -o /dev/null -w '%{http_code}' \
     "$LOC&digest=$DIG" 2>"$T/curl.err")" = 201 ] || fail "2 MiB PUT through the proxy"
grep -qi '^> Expect: 100-continue' "$T/curl.err" || fail "curl did not send Expect: 100-continue"
[ "$(code -I "http://127.0.0.1:$P/v2/big/blobs/$DIG")" = 200 ] || fail "2 MiB blob missing"
ok "2 MiB monolithic PUT with Expect: 100-continue through the proxy"

echo "selftest passed in ${SECONDS}s"
