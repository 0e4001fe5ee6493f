"""Build the benchmark's synthetic runner image and push it to a local registry.

    python3 -m bench.image --registry 127.0.0.1:PORT [--repository gpustack/runner]
                           [--tag cuda12.9-vllm0.27.1] [--out image.json] [--cache DIR]

A Docker v2 manifest list with two Docker v2 children (linux/amd64, linux/arm64/v8), each
about 1.9 GB uncompressed in gzip layers, bottom to top:

    0 base      ~256 MiB, per architecture (different bytes, so the platforms differ)
    1 vllm      ~1.5 GiB, shared by both platforms: ~4,400 torch files of a few hundred KB
                (dist-packages/torch sorts before dist-packages/vllm), then the vllm package
                with the patchable multi_connector.py (imagekit/pysrc.py, shape "data",
                0.27.1), its __pycache__ .pyc, and vllm-0.27.1.dist-info/METADATA
    2 copy      entrypoint + runner.yaml (a few KB)
    3 pip       gpustack-runtime + pip cache (~12 MiB)
    4 stamp     one small file

File contents are slices of a 16 MiB pool of reproducible pseudo-random bytes (30% text
made of Python-like words, 70% machine-code-like token streams with 15% fresh random
tokens), so gzip gets about 2.5x, like real wheels. Layers are compressed with zlib level 1
(gzip wrapper, no mtime, no name): level 6 would take ~4x longer to generate and compresses
this data only ~10% better. Everything is deterministic: same generator version, same digests.

Layer files are written streaming (tar -> gzip -> file, hashing both sides) into
${RUNNER_PATCH_CACHE:-~/.cache/runner-patch}/bench/<generator key>/ and reused by later runs.
Blobs are uploaded with one monolithic PUT each, streamed from the file. Standard library only
(and imagekit, this repository's image building package: layers, manifests, the registry client).
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import random
import sys
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
from imagekit import manifest, pysrc, vllm  # noqa: E402
from imagekit.digest import sha256  # noqa: E402
from imagekit.layer import write_entries  # noqa: E402
from imagekit.media import AMD64, ARM64, DOCKER_CONFIG, DOCKER_LAYER, DOCKER_LIST, DOCKER_MANIFEST  # noqa: E402
from imagekit.registry import Client  # noqa: E402

# Bump when anything below changes the bytes of a layer.
GENERATOR_VERSION = 1
LEVEL = 1  # gzip level of the image's layers
POOL_SIZE = 16 << 20
MIB = 1 << 20

SITE = vllm.SITE312
VERSION = "0.27.1"
PY_TAG = "cpython-312"
ARCHS = {"amd64": AMD64, "arm64": ARM64}
TRIPLET = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

# Sizes (uncompressed payload, before tar headers).
BASE_BYTES = 256 * MIB
TORCH_BYTES = 1300 * MIB
VLLM_FILLER_BYTES = 236 * MIB
PIP_BYTES = 12 * MIB

PARAMS = dict(v=GENERATOR_VERSION, level=LEVEL, pool=POOL_SIZE, base=BASE_BYTES, torch=TORCH_BYTES,
              vllm=VLLM_FILLER_BYTES, pip=PIP_BYTES, version=VERSION)


def cache_key():
    h = hashlib.sha256(json.dumps(PARAMS, sort_keys=True).encode()).hexdigest()[:12]
    return f"gen{GENERATOR_VERSION}-{h}"


# --- content ----------------------------------------------------------------

_SYLLABLES = ("ten sor mod ule for ward grad back cuda ker nel att ion lay er norm _ q proj conv "
              "pool quant scale bias ptr stride shape dim self return def import torch int float "
              "x y 0 1 2").split()


def make_pool(seed):
    """POOL_SIZE reproducible bytes that gzip compresses about 2.5x (level 1)."""
    r = random.Random(f"runner-patch-bench:{seed}")
    vocab = ["".join(r.choice(_SYLLABLES) for _ in range(r.randint(1, 4))) for _ in range(2000)]
    parts, size = [], 0
    while size < POOL_SIZE:
        n = r.randint(4096, 65536)
        if r.random() < 0.3:  # source-like text
            lines, m = [], 0
            while m < n:
                line = "    " * r.randint(0, 3) + " ".join(r.choices(vocab, k=r.randint(2, 12))) + "\n"
                lines.append(line)
                m += len(line)
            part = "".join(lines).encode()[:n]
        else:  # machine-code-like: tokens from a small dictionary, some fresh
            toks = [r.randbytes(r.randint(4, 24)) for _ in range(256)]
            out, m = [], 0
            while m < n:
                t = r.randbytes(r.randint(4, 24)) if r.random() < 0.15 else toks[r.randrange(256)]
                out.append(t)
                m += len(t)
            part = b"".join(out)[:n]
        parts.append(part)
        size += len(part)
    return b"".join(parts)[:POOL_SIZE]


class Filler:
    """Hands out reproducible file contents as slices of one pool."""

    def __init__(self, seed):
        self.pool = memoryview(make_pool(seed))
        self.r = random.Random(f"offsets:{seed}")

    def take(self, size):
        off = self.r.randrange(0, POOL_SIZE - size)
        return self.pool[off:off + size]

    def sizes(self, total, lo, hi):
        """File sizes between lo and hi (skewed small, as in real packages) summing to ~total."""
        out, s = [], 0
        while s < total:
            n = int(lo + (hi - lo) * self.r.random() ** 2)
            out.append(n)
            s += n
        return out


# --- the layers --------------------------------------------------------------


def base_entries(arch):
    f = Filler(f"base:{arch}")
    t = TRIPLET[arch]
    e = [
        ("etc/os-release", "file", 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n'),
        ("etc/runner-arch", "file", f"{arch}\n"),
        ("tmp", "dir", 0o1777),
        ("root", "dir", 0o700),
        ("usr/bin/python3.12", "file", f.take(6 * MIB), 0o755),
        ("usr/bin/python3", "symlink", "python3.12"),
    ]
    for i, n in enumerate(f.sizes(BASE_BYTES * 3 // 4, 64 * 1024, 4 * MIB)):
        e.append((f"usr/lib/{t}/lib{i // 40:02d}/libsynth{i:04d}.so.1", "file", f.take(n), 0o755))
    for i, n in enumerate(f.sizes(BASE_BYTES // 4, 1024, 256 * 1024)):
        e.append((f"usr/share/doc/pkg{i // 25:03d}/file{i:04d}.txt", "file", f.take(n)))
    return e


TORCH_DIRS = ("_C", "_dynamo", "_inductor", "_refs", "ao/quantization", "autograd", "backends", "csrc/api",
              "cuda", "distributed", "fx", "include/ATen", "include/c10", "jit", "lib", "nn/modules",
              "onnx", "optim", "sparse", "testing", "utils")
VLLM_DIRS = ("attention/backends", "compilation", "config", "engine", "entrypoints/openai", "executor",
             "lora", "model_executor/layers", "model_executor/models", "multimodal", "platforms",
             "transformers_utils", "v1/attention", "v1/core", "v1/engine", "v1/worker")


def vllm_entries():
    f = Filler("vllm")
    e = []
    for i, n in enumerate(f.sizes(TORCH_BYTES, 16 * 1024, 640 * 1024)):
        d = TORCH_DIRS[i % len(TORCH_DIRS)]
        ext = (".py", ".so", ".pyi", ".h")[i % 4]
        e.append((f"{SITE}/torch/{d}/m{i:05d}{ext}", "file", f.take(n)))
    for i, n in enumerate(f.sizes(VLLM_FILLER_BYTES, 8 * 1024, 512 * 1024)):
        d = VLLM_DIRS[i % len(VLLM_DIRS)]
        e.append((f"{SITE}/vllm/{d}/m{i:04d}.py", "file", f.take(n)))
    v1 = f"{SITE}/{vllm.V1_DIR}"
    mc = pysrc.multi_connector(VERSION, "data", 2)
    e += vllm.package(SITE, VERSION, PY_TAG, f.take(8 * MIB), mc, so_mode=0o755)
    e += [
        (f"{v1}/nixl_connector.py", "file", f.take(96 * 1024)),
        (f"{v1}/p2p/p2p_nccl_engine.py", "file", f.take(48 * 1024)),
    ]
    e += vllm.wheel_dist_info(SITE, VERSION, "Synthetic vllm (benchmark image)")
    return e


def copy_entries():
    return [
        ("usr/local/bin/gpustack-entrypoint", "file", "#!/bin/sh\nset -e\nexec \"$@\"\n", 0o755),
        ("etc/gpustack/runner.yaml", "file", f"backend: cuda\nservice: vllm\nversion: {VERSION}\n"),
    ]


def pip_entries():
    f = Filler("pip")
    e = [("root", "dir", 0o700)]
    for i, n in enumerate(f.sizes(PIP_BYTES // 2, 2048, 256 * 1024)):
        e.append((f"{SITE}/gpustack_runtime/m{i:03d}.py", "file", f.take(n)))
    for i, n in enumerate(f.sizes(PIP_BYTES // 2, 4096, 512 * 1024)):
        e.append((f"root/.cache/pip/http-v2/{i % 16:x}/{i:04d}", "file", f.take(n)))
    e.append((f"{SITE}/gpustack_runtime-0.1.0.dist-info/METADATA", "file",
              pysrc.metadata("gpustack-runtime", "0.1.0", "Synthetic runtime helper")))
    return e


def stamp_entries():
    return [("etc/gpustack/stamp", "file", "done\n")]


LAYERS = {
    # name: (entries function, args, created_by)
    "vllm": (vllm_entries, (), f"RUN /bin/sh -c pip install vllm=={VERSION} # buildkit"),
    "base-amd64": (base_entries, ("amd64",), "/bin/sh -c #(nop) ADD file:amd64 in / "),
    "base-arm64": (base_entries, ("arm64",), "/bin/sh -c #(nop) ADD file:arm64 in / "),
    "copy": (copy_entries, (), "COPY gpustack-entrypoint /usr/local/bin/ # buildkit"),
    "pip": (pip_entries, (), "RUN /bin/sh -c pip install gpustack-runtime # buildkit"),
    "stamp": (stamp_entries, (), "RUN /bin/sh -c echo done > /etc/gpustack/stamp # buildkit"),
}


def stack(arch):
    return [f"base-{arch}", "vllm", "copy", "pip", "stamp"]


def _generate_one(name, out_dir):
    fn, args, _ = LAYERS[name]
    t = time.monotonic()
    path = os.path.join(out_dir, f"{name}.tar.gz")
    info = write_entries(path, fn(*args), LEVEL)
    os.replace(path + ".part", path)
    info["seconds"] = round(time.monotonic() - t, 2)
    return name, info


def generate(cache_root, log=print):
    """Layer files in the cache (generated once). Returns (dir, {name: info}, seconds, cached)."""
    d = os.path.join(cache_root, cache_key())
    index = os.path.join(d, "layers.json")
    if os.path.exists(index):
        with open(index) as f:
            layers = json.load(f)
        files = {n: os.path.join(d, f"{n}.tar.gz") for n in LAYERS}
        if all(n in layers and os.path.exists(f) and os.path.getsize(f) == layers[n]["size"]
               for n, f in files.items()):
            return d, layers, 0.0, True
    os.makedirs(d, exist_ok=True)
    t = time.monotonic()
    log(f"generating layers into {d} (first run only; 2 processes)")
    layers = {}
    # The big layer alone in one process, everything else in the other.
    with concurrent.futures.ProcessPoolExecutor(max_workers=2) as ex:
        futs = [ex.submit(_generate_rest, ["vllm"], d)]
        futs.append(ex.submit(_generate_rest, [n for n in LAYERS if n != "vllm"], d))
        for fut in futs:
            for name, info in fut.result():
                layers[name] = info
                log(f"  {name}: {info['uncompressed'] / MIB:.0f} MiB -> {info['size'] / MIB:.0f} MiB "
                    f"({info['uncompressed'] / max(info['size'], 1):.2f}x), {info['files']} files, "
                    f"{info['seconds']} s")
    seconds = time.monotonic() - t
    with open(index + ".part", "w") as f:
        json.dump({n: layers[n] for n in LAYERS}, f, indent=1)
    os.replace(index + ".part", index)
    return d, layers, seconds, False


def _generate_rest(names, d):
    return [_generate_one(n, d) for n in names]


# --- image JSON --------------------------------------------------------------


def config_for(arch, layers):
    names = stack(arch)
    plat = ARCHS[arch]
    history = []
    for i, n in enumerate(names):
        e = {"created": "2026-05-01T00:00:%02d.000000000Z" % i, "created_by": LAYERS[n][2]}
        if i:
            e["comment"] = "buildkit.dockerfile.v0"
        history.append(e)
    history.append({"created": "2026-05-01T00:00:10.000000000Z", "created_by": 'CMD ["vllm", "serve"]',
                    "comment": "buildkit.dockerfile.v0", "empty_layer": True})
    cfg = {
        "architecture": plat.arch,
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                           f"VLLM_VERSION={VERSION}"],
                   "Entrypoint": ["/usr/local/bin/gpustack-entrypoint"], "Cmd": ["vllm", "serve"],
                   "WorkingDir": "/",
                   "Labels": {"com.gpustack.runner.backend": "cuda", "com.gpustack.runner.service": "vllm",
                              "com.gpustack.runner.service.version": VERSION}},
        "created": "2026-05-01T00:00:10.000000000Z",
        "history": history,
        "os": plat.os,
        "rootfs": {"type": "layers", "diff_ids": [layers[n]["diff_id"] for n in names]},
    }
    if plat.variant:
        cfg["variant"] = plat.variant
    return json.dumps(cfg, separators=(",", ":")).encode()


def push(addr, repo, tag, layer_dir, layers, log=print):
    reg = Client(addr, repo)
    t = time.monotonic()
    out = {"repository": repo, "tag": tag, "platforms": {}}
    pushed = set()
    descs = []
    for arch in ARCHS:
        names = stack(arch)
        for n in names:
            L = layers[n]
            if L["digest"] not in pushed:
                reg.push_blob(path=os.path.join(layer_dir, f"{n}.tar.gz"), digest=L["digest"], size=L["size"])
                pushed.add(L["digest"])
        cfg = config_for(arch, layers)
        reg.push_blob(cfg)
        m = manifest.image_manifest(
            DOCKER_MANIFEST,
            manifest.descriptor(DOCKER_CONFIG, cfg),
            [manifest.descriptor(DOCKER_LAYER, digest=layers[n]["digest"], size=layers[n]["size"]) for n in names],
        )
        mb = manifest.dump(m, docker_json=True)
        reg.put_manifest(sha256(mb), mb, DOCKER_MANIFEST)
        plat = ARCHS[arch]
        descs.append(manifest.descriptor(DOCKER_MANIFEST, mb, platform=plat.descriptor()))
        out["platforms"][plat.key] = {
            "manifest": sha256(mb),
            "layers": [dict(name=n, digest=layers[n]["digest"], size=layers[n]["size"],
                            uncompressed=layers[n]["uncompressed"]) for n in names],
        }
    idx = manifest.dump(manifest.index(DOCKER_LIST, descs), docker_json=True)
    reg.put_manifest(tag, idx, DOCKER_LIST)
    out["digest"] = sha256(idx)
    out["push_seconds"] = round(time.monotonic() - t, 2)
    log(f"pushed {addr}/{repo}:{tag} ({out['digest']}) in {out['push_seconds']} s")
    return out


def default_cache():
    root = os.environ.get("RUNNER_PATCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "runner-patch")
    return os.path.join(root, "bench")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--registry", help="host:port (omit to only generate the layer files)")
    p.add_argument("--repository", default="gpustack/runner")
    p.add_argument("--tag", default="cuda12.9-vllm0.27.1")
    p.add_argument("--cache", default=default_cache())
    p.add_argument("--out", help="write the image description (JSON) here")
    a = p.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    d, layers, secs, cached = generate(a.cache, log)
    log(f"layers {'from cache' if cached else f'generated in {secs:.1f} s'}: {d}")
    result = {"cache_dir": d, "generated": not cached, "generate_seconds": round(secs, 2), "layers": layers}
    if a.registry:
        result.update(push(a.registry, a.repository, a.tag, d, layers, log))
    text = json.dumps(result, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
