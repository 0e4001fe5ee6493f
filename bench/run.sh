#!/usr/bin/env bash
# `make bench`: the runner-patch benchmark (issue 6). See bench/README.md.
#
#   bash bench/run.sh [--keep] [--no-buildah] [--work DIR]
#
# Needs: python3, curl, /usr/bin/time (Debian `time`), skopeo, umoci, docker-registry; uses igzip, pigz
# and buildah when present. As root, missing Debian packages are installed with apt-get;
# otherwise it stops and names them. The binary: $RUNNER_PATCH_BIN or target/release/runner-patch
# (build it first: cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

apt_install() {  # apt_install PKG...: quiet install, refreshing the package lists once if needed
    apt-get install -y -q "$@" >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$@" >/dev/null 2>&1; }
}

missing=()
for need in "time:/usr/bin/time" "curl:curl" "skopeo:skopeo" "umoci:umoci" "docker-registry:docker-registry" "python3:python3"; do
    pkg=${need%%:*} cmd=${need#*:}
    command -v "$cmd" >/dev/null 2>&1 || [ -x "$cmd" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "bench: installing ${missing[*]}" >&2
        apt_install "${missing[@]}" || { echo "bench: apt-get install ${missing[*]} failed" >&2; exit 2; }
    else
        echo "bench: missing ${missing[*]}; install them (Debian: sudo apt-get install ${missing[*]})" >&2
        exit 2
    fi
fi
# Optional: igzip and pigz (faster floors) and buildah (a second rebuild route).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    command -v igzip >/dev/null || apt_install isal || echo "bench: isal (igzip) not installable; no igzip floor" >&2
    command -v pigz >/dev/null || apt_install pigz || echo "bench: pigz not installable; no pigz floor" >&2
    case " $* " in *" --no-buildah "*) ;; *)
        command -v buildah >/dev/null || apt_install buildah || echo "bench: buildah not installable; route skipped" >&2 ;;
    esac
fi

bin=${RUNNER_PATCH_BIN:-target/release/runner-patch}
if [ ! -x "$bin" ]; then
    echo "bench: $bin not found; build it first: cargo build --release" >&2
    exit 2
fi
rc=0
python3 -m bench.bench --bin "$bin" "$@" || rc=$?
echo "bench: finished in $(( $(date +%s) - start )) s (exit $rc)" >&2
exit $rc
