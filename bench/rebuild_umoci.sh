#!/usr/bin/env bash
# The rebuild route with skopeo + umoci, as a user without runner-patch would take it:
# per platform, copy the image to an OCI layout, unpack it, edit the file, repack, copy it back.
#
#   bash bench/rebuild_umoci.sh ADDR REPO TAG NEWTAG WORKDIR
#
# Pushes REPO:NEWTAG-amd64, REPO:NEWTAG-arm64 and an OCI index REPO:NEWTAG over it. skopeo and
# umoci cannot write an index of separately built images, so that last step (a ~1 KB PUT) is a
# few lines of Python below.
set -euo pipefail
addr=$1 repo=$2 tag=$3 newtag=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
file=usr/local/lib/python3.12/dist-packages/vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py
layout=$work/oci
mkdir -p "$work"

for arch in amd64 arm64; do
    skopeo copy -q --src-tls-verify=false --override-os linux --override-arch "$arch" \
        "docker://$addr/$repo:$tag" "oci:$layout:$arch"
    umoci unpack --image "$layout:$arch" "$work/bundle-$arch" >/dev/null
    python3 "$here/edit_file.py" "$work/bundle-$arch/rootfs/$file"
    rm -f "$work/bundle-$arch/rootfs/$(dirname "$file")"/__pycache__/multi_connector.*.pyc
    umoci repack --image "$layout:$arch-patched" "$work/bundle-$arch" >/dev/null
    skopeo copy -q --dest-tls-verify=false "oci:$layout:$arch-patched" "docker://$addr/$repo:$newtag-$arch"
done

python3 - "$addr" "$repo" "$newtag" <<'EOF'
import hashlib, json, sys, urllib.request
addr, repo, tag = sys.argv[1:]
OCI_M, OCI_I = "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json"
ms = []
for arch, variant in (("amd64", None), ("arm64", "v8")):
    req = urllib.request.Request(f"http://{addr}/v2/{repo}/manifests/{tag}-{arch}", headers={"Accept": OCI_M})
    with urllib.request.urlopen(req) as r:
        body, mt = r.read(), r.headers["Content-Type"]
    plat = {"architecture": arch, "os": "linux", **({"variant": variant} if variant else {})}
    ms.append({"mediaType": mt, "size": len(body), "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
               "platform": plat})
idx = json.dumps({"schemaVersion": 2, "mediaType": OCI_I, "manifests": ms}).encode()
req = urllib.request.Request(f"http://{addr}/v2/{repo}/manifests/{tag}", data=idx, method="PUT",
                             headers={"Content-Type": OCI_I})
urllib.request.urlopen(req).close()
EOF
