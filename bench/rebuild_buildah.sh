#!/usr/bin/env bash
# The rebuild route with buildah (from / copy / commit / push, then a manifest list), with its
# own storage under WORKDIR (overlay driver; needs root or a working fuse-overlayfs).
#
#   bash bench/rebuild_buildah.sh ADDR REPO TAG NEWTAG WORKDIR
#
# The file is read and the stale .pyc removed through `buildah mount` (a `buildah run` would
# need a container runtime; the bytes moved are the same).
set -euo pipefail
addr=$1 repo=$2 tag=$3 newtag=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
file=usr/local/lib/python3.12/dist-packages/vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py
mkdir -p "$work"
b() { buildah --root "$work/root" --runroot "$work/run" --storage-driver overlay "$@"; }

for arch in amd64 arm64; do
    c=$(b from -q --tls-verify=false --os linux --arch "$arch" "docker://$addr/$repo:$tag")
    mnt=$(b mount "$c")
    cp "$mnt/$file" "$work/multi_connector-$arch.py"
    python3 "$here/edit_file.py" "$work/multi_connector-$arch.py"
    rm -f "$mnt/$(dirname "$file")"/__pycache__/multi_connector.*.pyc
    b umount "$c" >/dev/null
    b copy "$c" "$work/multi_connector-$arch.py" "/$file" >/dev/null
    b commit -q --format docker "$c" "$addr/$repo:$newtag-$arch" >/dev/null
    b push -q --tls-verify=false "$addr/$repo:$newtag-$arch" "docker://$addr/$repo:$newtag-$arch"
done
b manifest create "$newtag-list" >/dev/null
for arch in amd64 arm64; do
    b manifest add --tls-verify=false "$newtag-list" "docker://$addr/$repo:$newtag-$arch" >/dev/null
done
b manifest push -q --all --tls-verify=false "$newtag-list" "docker://$addr/$repo:$newtag"
