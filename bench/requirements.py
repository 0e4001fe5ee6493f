"""The requirements route's bench (issue 37): a `wheels` patch of requirement lines on an image
holding 500 installed distributions, against the rebuild a maintainer would run instead.

    python3 -m bench.requirements [--bin target/release/runner-patch] [--cache DIR] [--work DIR]
                                  [--keep] [--repeat N]
                                  [--results bench/results/requirements-latest.md]

The image (linux/amd64, one tag in a fresh local registry): the bench image's amd64 layers
(bench/image.py: its base, the 631 MiB `vllm` layer of torch- and vLLM-shaped files, and the
small ones above), the wheels proof's Python root above its base (Debian's CPython 3.11,
`python3 -m tests.proof.pyroot build amd64`), and on top a layer of 500 installed distributions in `/usr/local/lib/python3.11/dist-packages` (METADATA,
RECORD, INSTALLER; three of them with torch-sized RECORDs of 20,000 rows, about 2 MiB each, and
`bench-dep-7` 1.0 with its files). The index (tests/proof/pyindex.py, PEP 658 metadata) serves
`bench-new` 1.0 (a 4 MiB wheel, which needs `bench-dep-7>=2.0`) and `bench-dep-7` 2.0. The lines:
`bench-new==1.0`.

Routes, each under /usr/bin/time -v, traffic from the registry's access log:
  q0. the floor: every layer blob fetched by curl and inflated to /dev/null by the fastest
      decoder here (igzip, else pigz, else gzip), all at once;
  q1. `runner-patch apply` of the requirements patch (no scan cache): wall time, peak RSS,
      layer bytes read;
  q2. the rebuild: `skopeo copy` to an OCI layout, `umoci unpack`, `uv pip install --target
      <the image's dist-packages> --python-platform x86_64-manylinux_2_36 --python-version 3.11`
      of the same lines from the same index, `umoci repack`, `skopeo copy` back as a new tag;
      q0, q1 and q2 run in turns, each --repeat times (3), and their medians are compared
      (peak RSS: the highest of q1's runs);
  q3. `runner-patch lock` then `apply --locked` with one scan cache: layer bytes each read;
  q4. `plan` again with that cache: layer blobs read;
  q5. the fleet: the image under eight tags, `apply --jobs 8 --no-cache` of all of them: blob
      reads made against distinct blobs read.
Targets: q1 at least 10x faster than q2; q1 within 1.5x of the floor; q1's peak RSS under
100 MiB; `apply --locked` reads under 5% of the layer bytes `lock` read; q4 reads no layer
blob; q5 reads each blob once.
"""

import argparse
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
from bench import bench as B  # noqa: E402
from bench import image  # noqa: E402
from fixtures import registry as fxreg  # noqa: E402
from imagekit.image import push  # noqa: E402
from imagekit.layer import Layer  # noqa: E402
from imagekit.media import AMD64  # noqa: E402
from imagekit.registry import Client  # noqa: E402
from imagekit.tree import TreeLayer  # noqa: E402
from imagekit.wheel import Wheel, record_hash  # noqa: E402

REPO, TAG = "gpustack/runner", "cuda12.9-vllm0.27.1"
SITE = "usr/local/lib/python3.11/dist-packages"
DISTS, BIG_RECORDS, BIG_ROWS = 500, 3, 20_000
LINES = ["bench-new==1.0"]
MIB = 1 << 20


class FileLayer:
    """A layer already written to a file (the bench image's cached `vllm` layer)."""

    def __init__(self, created_by, path, meta):
        self.created_by, self.path, self.meta = created_by, path, meta

    def build(self):
        return {"path": self.path, "digest": self.meta["digest"], "diff_id": self.meta["diff_id"],
                "size": self.meta["size"]}


def dists_layer():
    """500 installed distributions as pip leaves them (see the module's doc)."""
    layer = Layer(f"pip install ({DISTS} distributions)")
    for i in range(DISTS):
        name, version = f"bench-dep-{i}", "1.0"
        info = f"{SITE}/bench_dep_{i}-{version}.dist-info"
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        if i % 10 == 1:
            meta += f"Requires-Dist: bench-dep-{i - 1}>=1.0\n"
        files = {}
        if i == 7:
            files = {f"{SITE}/bench_dep_7/__init__.py": b'VERSION = "1.0"\n'}
        rows = [f"bench_dep_{i}-{version}.dist-info/METADATA,,", f"bench_dep_{i}-{version}.dist-info/RECORD,,"]
        rows += [f"{p[len(SITE) + 1:]},{record_hash(d)},{len(d)}" for p, d in files.items()]
        if i < BIG_RECORDS:  # torch-sized: rows for files of a package this layer does not hold
            rows += [f"torch_like_{i}/lib/part_{j:05d}/module_{j:05d}.py,"
                     f"sha256={hashlib.sha256(str(j).encode()).hexdigest()[:43]},{j * 7}"
                     for j in range(BIG_ROWS)]
        for p, d in files.items():
            layer.file(p, d)
        layer.file(f"{info}/METADATA", meta.encode())
        layer.file(f"{info}/INSTALLER", b"pip\n")
        layer.file(f"{info}/RECORD", ("\n".join(rows) + "\n").encode())
    return layer


def index_wheels(directory):
    payload = image.Filler("requirements").take(4 * MIB)
    return [Wheel("bench-new", "1.0", requires=["bench-dep-7>=2.0"],
                  files={"bench_new/__init__.py": 'VERSION = "1.0"\n', "bench_new/blob.bin": payload}).write(directory),
            Wheel("bench-dep-7", "2.0", files={"bench_dep_7/__init__.py": 'VERSION = "2.0"\n'}).write(directory)]


def patch_folder(work, index_url):
    folder = os.path.join(work, "patch")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "patch.toml"), "w") as f:
        f.write('id = "bench-requirements"\nkind = "wheels"\ntitle = "bench: requirement lines"\n'
                f'backends = ["cuda"]\nrequirements = {json.dumps(LINES)}\nindex-url = "{index_url}"\n')
    return folder


def rebuild_script(work, src, dst, index_url, n=""):
    """q2 as a shell script: the rebuild a maintainer would run (tools this project did not write),
    in a new folder for each run (removed with the scratch folder: a removal between runs would
    leave the file system busy with it during the next one)."""
    uv = shutil.which("uv") or os.path.expanduser("~/.cache/runner-patch/lock-tools/bin/uv")
    path = os.path.join(work, f"rebuild{n}.sh")
    with open(path, "w") as f:
        f.write(f"""set -euo pipefail
mkdir -p {work}/rebuild{n}
cd {work}/rebuild{n}
skopeo copy -q --src-tls-verify=false docker://{src} oci:layout:t
umoci unpack --image layout:t bundle
UV_NO_CONFIG=1 {uv} pip install -q --no-cache --target bundle/rootfs/{SITE} \\
    --python-platform x86_64-manylinux_2_36 --python-version 3.11 --index-url {index_url} {' '.join(LINES)}
umoci repack --image layout:t bundle
skopeo copy -q --dest-tls-verify=false oci:layout:t docker://{dst}
""")
    return path


def cpu(rows):
    """Each run's CPU seconds: its own (user + sys), the registry's, and other processes'."""
    return ", ".join(f"{x.get('user', 0) + x.get('sys', 0):.1f}/{x['registry_cpu']:.1f}/{x['other_cpu']:.1f}"
                     for x in rows)


def floor_script(work, addr, digests, decoder):
    """q0 as a shell script: each layer blob GET by curl and inflated to /dev/null, all at once."""
    path = os.path.join(work, "floor.sh")
    with open(path, "w") as f:
        f.write("set -u -o pipefail\npids=()\n")
        for d in digests:
            f.write(f"(curl -sSf http://{addr}/v2/{REPO}/blobs/{d} | {decoder} -dc > /dev/null) & pids+=($!)\n")
        f.write('for p in "${pids[@]}"; do wait "$p" || exit 1; done\n')
    return path


def median(rows):
    """The row of median wall time (the lower middle of an even count), with every run's wall
    time and exit code kept beside it."""
    ranked = sorted(rows, key=lambda x: x["wall"])
    row = dict(ranked[(len(ranked) - 1) // 2])
    row["walls"] = [x["wall"] for x in rows]
    row["cpus"] = cpu(rows)
    row["rc"] = next((x["rc"] for x in rows if x["rc"] != 0), 0)
    row["rss_kib"] = max(x.get("rss_kib", 0) for x in rows)
    return row


def get_counts(log_path, start, layers):
    """{digest: blob GETs} of LAYERS in the access log after offset START."""
    out = {}
    with open(log_path, errors="replace") as f:
        f.seek(start)
        for line in f:
            m = B.ACCESS.match(line)
            if m and m.group(1) == "GET" and "/blobs/" in m.group(2):
                d = m.group(2).rsplit("/blobs/", 1)[1]
                if d in layers:
                    out[d] = out.get(d, 0) + 1
    return out


def layer_bytes(row, layers):
    return sum(n for d, n in row["layer_gets"].items() if d in layers)


def run(a, log, work):
    from tests.proof import pyindex, pyroot
    r = {}
    regdir = os.path.join(work, "registry")
    addr, reg_pid = fxreg.start(regdir)
    try:
        layer_dir, layers, _, _ = image.generate(a.cache, log)
        base = TreeLayer("debian bookworm python3.11 amd64", str(pyroot.build("amd64")),
                         os.path.join(work, "base.tar.gz"), skip={pyroot.MARKER})
        # The bench image's amd64 stack with the Python root above its base (whose
        # /usr/bin/python3 is a stand-in) and the installed distributions on top.
        bench_layers = [FileLayer(n, os.path.join(layer_dir, f"{n}.tar.gz"), layers[n]) for n in image.stack("amd64")]
        stack = [bench_layers[0], base, *bench_layers[1:], dists_layer()]
        client = Client(addr, REPO)
        try:
            pushed = push(client, TAG, {AMD64: stack}, style="single-docker")
        finally:
            client.close()
        built = [L.build() for L in stack]
        all_layers = {x["digest"] for x in built}
        size = sum(x["size"] if "size" in x else len(x["blob"]) for x in built)
        r["image"] = {"layers": len(stack), "bytes": size, "digest": pushed["digest"]}
        b = B.Bench(work, regdir, reg_pid, log)
        with pyindex.Index(index_wheels(os.path.join(work, "index"))) as index:
            folder = patch_folder(work, index.url)
            src = f"{addr}/{REPO}"
            common = ["--backend", "cuda", "--repository", src, "--patch", folder]
            # q1 and q2 in turns, each `repeat` times; the median of each is compared (one run
            # of either can be slowed by the other processes of a small machine). Every timed
            # run starts with dirty pages written (os.sync): a rebuild's 1.6 GB unpack is still
            # being written back for seconds after it ends.
            # q0, the floor, in the same turns: every layer fetched by curl and inflated by the
            # fastest decoder here, all at once (the scan reads them side by side).
            decoder = next((d for d in ("igzip", "pigz", "gzip") if shutil.which(d)), None)
            floor = floor_script(work, addr, sorted(all_layers), decoder) if decoder else None
            q0s, q1s, q2s = [], [], []
            for i in range(1, a.repeat + 1):
                n = "" if i == 1 else f"-{i}"
                if floor:
                    q0s.append(b.measure(f"q0{n}", f"q0. floor: curl \\| {decoder} -dc, every layer at once",
                                         ["bash", floor], prepare=os.sync))
                q1s.append(b.measure(f"q1{n}", "q1. runner-patch apply (requirements)", [
                    a.bin, "-v", "apply", *common, "--tag", TAG, "--tag-suffix", f"-q1{n}", "--no-cache",
                    "--digest-map", os.path.join(work, f"q1{n}.json")], prepare=os.sync))
                q2s.append(b.measure(f"q2{n}", "q2. rebuild: skopeo, umoci, uv pip install --target, umoci, skopeo", [
                    "bash", rebuild_script(work, f"{src}:{TAG}", f"{src}:{TAG}-q2{n}", index.url, n)],
                    prepare=os.sync))
            r["q1"], r["q2"] = median(q1s), median(q2s)
            if q0s:
                r["q0"] = median(q0s)
            scans = os.path.join(work, "scans")
            r["q3a"] = b.measure("q3a", "q3. runner-patch lock", [
                a.bin, "-v", "lock", *common, "--tag", TAG, "--cache-dir", scans], prepare=os.sync)
            r["q3b"] = b.measure("q3b", "q3. runner-patch apply --locked", [
                a.bin, "-v", "apply", *common, "--tag", TAG, "--tag-suffix", "-q3", "--locked",
                "--cache-dir", scans, "--digest-map", os.path.join(work, "q3.json")], prepare=os.sync)
            r["q4"] = b.measure("q4", "q4. runner-patch plan, the scan cache filled", [
                a.bin, "-v", "plan", *common, "--tag", TAG, "--cache-dir", scans], prepare=os.sync)
            tags = [f"cuda12.{m}-vllm0.27.{p}" for m in (8, 9) for p in (1, 2, 3, 4)]
            manifest = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                                       f"docker://{src}:{TAG}"], capture_output=True, check=True).stdout
            client = Client(addr, REPO)
            try:
                for t in tags:
                    client.put_manifest(t, manifest, json.loads(manifest)["mediaType"])
            finally:
                client.close()
            q5_start = os.path.getsize(b.logfile)
            r["q5"] = b.measure("q5", "q5. runner-patch apply, eight tags, --jobs 8", [
                a.bin, "-v", "apply", "--backend", "cuda", "--repository", src, "--patch", folder,
                *[x for t in tags for x in ("--tag", t)], "--tag-suffix", "-q5", "--jobs", "8", "--no-cache",
                "--range-parallel", "1", "--digest-map", os.path.join(work, "q5.json")], prepare=os.sync)
        r["layers"] = all_layers
        r["reads"] = {k: layer_bytes(r[k], all_layers) for k in ("q1", "q3a", "q3b", "q4")}
        gets = get_counts(b.logfile, q5_start, all_layers)
        r["fleet"] = {"reads": sum(gets.values()), "distinct": len(gets)}
        return r
    finally:
        fxreg.stop(regdir)


def report(r, machine):
    q1, q2 = r["q1"], r["q2"]
    speed = q2["wall"] / max(q1["wall"], 1e-9)
    rss = q1.get("rss_kib", 0) / 1024
    reads = r["reads"]
    locked_share = reads["q3b"] / max(reads["q3a"], 1)
    fleet = r["fleet"]
    keys = [k for k in ("q0", "q1", "q2", "q3a", "q3b", "q4", "q5") if k in r]
    ok_all = all(r[k]["rc"] == 0 for k in keys)
    targets = [
        ("every route exits 0", ok_all, ", ".join(f"{k} {r[k]['rc']}" for k in keys)),
        ("q1 >= 10x faster than the rebuild (q2)", speed >= 10,
         f"{speed:.1f}x (median {q1['wall']:.2f} s vs {q2['wall']:.2f} s; runs: "
         f"{', '.join(f'{w:.2f}' for w in q1['walls'])} s vs {', '.join(f'{w:.2f}' for w in q2['walls'])} s)"),
        ("q1 peak RSS < 100 MiB with 500 distributions", rss < 100, f"{rss:.1f} MiB"),
        *([("q1 within 1.5x of the floor (q0)", q1["wall"] <= 1.5 * r["q0"]["wall"],
            f"{q1['wall'] / r['q0']['wall']:.2f}x (median {q1['wall']:.2f} s vs {r['q0']['wall']:.2f} s; floor runs: "
            f"{', '.join(f'{w:.2f}' for w in r['q0']['walls'])} s)")] if "q0" in r else []),
        ("apply --locked reads < 5% of lock's layer bytes", locked_share < 0.05,
         f"{B.fmt_bytes(reads['q3b'])} of {B.fmt_bytes(reads['q3a'])} ({locked_share:.1%})"),
        ("a second run with the scan cache reads no layer blob", reads["q4"] == 0, B.fmt_bytes(reads["q4"])),
        ("the fleet reads each distinct layer blob once", fleet["reads"] == fleet["distinct"],
         f"{fleet['reads']} reads of {fleet['distinct']} distinct blobs"),
    ]
    rows = [(k, r[k]) for k in keys]
    lines = [
        "# Requirements route bench", "",
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}. Machine: {machine}.", "",
        f"Image: {r['image']['layers']} layers, {B.fmt_bytes(r['image']['bytes'])} compressed "
        f"(the bench image's amd64 layers, a Python root, {DISTS} distributions). Lines: {', '.join(LINES)}.", "",
        "| route | wall | peak RSS | layer bytes read | down | up |", "|---|---:|---:|---:|---:|---:|"]
    for k, row in rows:
        label = row["label"] + (f" (median of {len(row['walls'])})" if len(row.get("walls", [])) > 1 else "")
        lines.append(f"| {label} | {row['wall']:.2f} s | {row.get('rss_kib', 0) / 1024:.1f} MiB | "
                     f"{B.fmt_bytes(layer_bytes(row, r['layers']))} | {B.fmt_bytes(row['down'])} | "
                     f"{B.fmt_bytes(row['up'])} |")
    lines += ["", f"CPU seconds per run (its own / the registry's / other processes'): q1 {q1['cpus']}; "
              f"q2 {q2['cpus']}.", ""]
    lines += ["| target | result | value |", "|---|---|---|"]
    lines += [f"| {n} | {'PASS' if ok else 'FAIL'} | {v} |" for n, ok, v in targets]
    return "\n".join(lines) + "\n", targets


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(B.ROOT, "target", "release", "runner-patch"))
    p.add_argument("--cache", default=image.default_cache())
    p.add_argument("--work", help="scratch folder (default: a new one under $TMPDIR, removed at the end)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    p.add_argument("--results", default=os.path.join(B.HERE, "results", "requirements-latest.md"))
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of q1 and of q2, in turns; their medians are compared (default 3)")
    a = p.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    # The tool's uv: RUNNER_PATCH_UV, else uv on PATH, else the pinned one the tests install
    # (python3 -m tests.proof.locktools install); this machine's uv settings never apply.
    locktools_uv = os.path.expanduser("~/.cache/runner-patch/lock-tools/bin/uv")
    if not os.environ.get("RUNNER_PATCH_UV") and not shutil.which("uv") and os.access(locktools_uv, os.X_OK):
        os.environ["RUNNER_PATCH_UV"] = locktools_uv
    os.environ["UV_NO_CONFIG"] = "1"
    if not os.access(a.bin, os.X_OK):
        log(f"bench: {a.bin} not found; build it first (cargo build --release)")
        return 2
    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="runner-patch-bench-req.")
    os.makedirs(work, exist_ok=True)
    snapshot = os.path.join(work, "runner-patch")
    shutil.copy2(a.bin, snapshot)
    a.bin = snapshot
    t = time.monotonic()
    try:
        r = run(a, log, work)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    m = B.machine(snapshot)
    text, targets = report(r, f"nproc {m['nproc']}, {m['cpu']}; {time.monotonic() - t:.0f} s in all")
    os.makedirs(os.path.dirname(a.results), exist_ok=True)
    with open(a.results, "w") as f:
        f.write(text)
    print(text)
    failed = [n for n, ok, _ in targets if not ok]
    print(f"{len(targets) - len(failed)} targets passed, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
