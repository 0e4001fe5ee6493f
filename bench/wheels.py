"""The wheels bench (issue 18, "Streams"): a wheel of at least 100 MB becomes a layer at no less
than half the speed of `gzip -6` on the same bytes, with peak RSS under 100 MiB.

    python3 -m bench.wheels [--example target/release/examples/layer_bench] [--cache DIR]
                            [--work DIR] [--results bench/results/wheels-latest.md]

Routes, each under /usr/bin/time -v (peak RSS):
  w1. the layer builder: every entry of the wheel as a streamed file, inflated from the wheel on
      disk as the layer is written, the layer spooled to TMPDIR (a scratch folder, checked empty
      afterwards) -- `layer_bench`, a cargo example over the library's builder, exactly what
      `apply` runs for a wheels patch between reading the lock and uploading;
  w2. `gzip -6 -c` of the layer's uncompressed tar (GNU gzip; the tar is `gzip -dc` of w1's blob,
      whose sha256 must be w1's diff_id), to /dev/null.
Target: w1's wall time <= 2x w2's (>= 0.5x gzip -6 speed); w1's peak RSS < 100 MiB. w1's blob is
checked: its sha256 is the digest it reported, GNU tar lists every wheel entry.

The wheel (cached in ${RUNNER_PATCH_CACHE:-~/.cache/runner-patch}/bench/wheel-v<V>/): 10 shared
libraries of 30 MiB each made of slices of bench/image.py's pool (70% machine-code-like token
streams, 30% Python-like text), a package `__init__.py` and its dist-info, deflated at zlib
level 6 as wheel builders do: 300 MiB of files in a 116 MB wheel. Standard library only.
"""

import argparse
import base64
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

sys.dont_write_bytecode = True
from bench import image  # noqa: E402

VERSION = 2
LIBS = 10
LIB_BYTES = 30 << 20
SLICE = 4 << 20
MIB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "bench")


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(cache, log):
    """The bench wheel (generated once into the cache); returns its path."""
    folder = os.path.join(cache, f"wheel-v{VERSION}")
    path = os.path.join(folder, "bigpkg-1.0-cp311-cp311-manylinux_2_17_x86_64.whl")
    if os.path.exists(path):
        return path
    os.makedirs(folder, exist_ok=True)
    t = time.monotonic()
    filler = image.Filler("wheels")
    tmp = path + ".tmp"
    rows = []
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        def add(name, data, mode=0o644):
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100000 | mode) << 16
            z.writestr(info, data, compresslevel=6)
            rows.append(f"{name},{record_hash(data)},{len(data)}")

        add("bigpkg/__init__.py", b"from . import _lib\n")
        for i in range(LIBS):
            data = b"".join(bytes(filler.take(SLICE)) for _ in range(LIB_BYTES // SLICE))
            data += bytes(filler.take(LIB_BYTES % SLICE)) if LIB_BYTES % SLICE else b""
            add(f"bigpkg/_lib/libbig{i}.so", data, 0o755)
        add("bigpkg-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: bigpkg\nVersion: 1.0\n")
        add("bigpkg-1.0.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: false\nTag: cp311-cp311-manylinux_2_17_x86_64\n")
        rows.append("bigpkg-1.0.dist-info/RECORD,,")
        info = zipfile.ZipInfo("bigpkg-1.0.dist-info/RECORD", date_time=(2024, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o100644 << 16
        z.writestr(info, ("\n".join(rows) + "\n").encode(), compresslevel=6)
    os.replace(tmp, path)
    log(f"wheel generated in {time.monotonic() - t:.1f} s: {os.path.getsize(path) / MIB:.1f} MiB")
    return path


def entries(wheel):
    """Each entry's data offset, deflated and inflated size, sha256 and mode, from the zip."""
    out = []
    with zipfile.ZipFile(wheel) as z, open(wheel, "rb") as f:
        for i in z.infolist():
            f.seek(i.header_offset)
            head = f.read(30)
            name_len = int.from_bytes(head[26:28], "little")
            extra_len = int.from_bytes(head[28:30], "little")
            h = hashlib.sha256()
            with z.open(i) as e:
                for block in iter(lambda: e.read(MIB), b""):
                    h.update(block)
            out.append({"path": "usr/local/lib/python3.11/dist-packages/" + i.filename,
                        "offset": i.header_offset + 30 + name_len + extra_len,
                        "csize": i.compress_size, "size": i.file_size, "sha256": h.hexdigest(),
                        "mode": 0o755 if (i.external_attr >> 16) & 0o111 else 0o644})
    return out


def timed(cmd, work, name, env=None, stdout=None):
    """Runs `cmd` under /usr/bin/time -v: (wall seconds, peak RSS KiB, completed process)."""
    tv = os.path.join(work, f"{name}.time")
    t = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-v", "-o", tv] + cmd, env=env, stdout=stdout or subprocess.PIPE,
                       stderr=subprocess.PIPE)
    wall = time.monotonic() - t
    rss, cpu = 0, 0.0
    with open(tv) as f:
        for line in f:
            if "Maximum resident set size" in line:
                rss = int(line.rsplit(":", 1)[1])
            elif "User time (seconds)" in line or "System time (seconds)" in line:
                cpu += float(line.rsplit(":", 1)[1])
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    return wall, rss, cpu, p


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def other_cpu():
    """CPU seconds of the whole machine so far (from /proc/stat), to tell a busy machine."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    return (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")


def run(a, log):
    wheel = make_wheel(a.cache, log)
    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="runner-patch-wheels.")
    os.makedirs(work, exist_ok=True)
    try:
        ents = entries(wheel)
        ej = os.path.join(work, "entries.json")
        with open(ej, "w") as f:
            json.dump(ents, f)
        spool = os.path.join(work, "tmp")
        os.makedirs(spool, exist_ok=True)
        blob = os.path.join(work, "layer.tar.gz")
        env = dict(os.environ, TMPDIR=spool)
        cpu0 = other_cpu()
        w1, rss1, own1, p = timed([a.example, ej, wheel, blob], work, "w1", env=env)
        cpu1 = other_cpu()
        out = json.loads(p.stdout)
        left = os.listdir(spool)
        checks = [("blob sha256 is the digest", sha256_file(blob) == out["digest"]),
                  ("spooled to TMPDIR", out["spooled"]), ("nothing left in TMPDIR", not left)]
        tar = os.path.join(work, "layer.tar")
        with open(tar, "wb") as f:
            subprocess.run(["gzip", "-dc", blob], stdout=f, check=True)
        checks.append(("gzip -dc of the blob hashes to the diff_id", sha256_file(tar) == out["diff_id"]))
        listing = subprocess.run(["tar", "-tf", tar], capture_output=True, text=True, check=True).stdout.split()
        checks.append(("GNU tar lists every wheel entry", sorted(listing) == sorted(e["path"] for e in ents)))
        cpu2 = other_cpu()
        with open(os.devnull, "wb") as null:
            w2, rss2, own2, _ = timed(["gzip", "-6", "-c", tar], work, "w2", stdout=null)
        cpu3 = other_cpu()
        return dict(wheel=wheel, wheel_size=os.path.getsize(wheel), tar_size=os.path.getsize(tar),
                    files=sum(e["size"] for e in ents), out=out, w1=w1, rss1=rss1, w2=w2, rss2=rss2,
                    checks=checks, cpu=[cpu1 - cpu0 - own1, cpu3 - cpu2 - own2],
                    own=[own1, own2])
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


def report(r, machine):
    ratio = r["w2"] / r["w1"]
    targets = [("w1 >= 0.5x gzip -6 speed", ratio >= 0.5, f"{ratio:.2f}x"),
               ("w1 peak RSS < 100 MiB", r["rss1"] < 100 * 1024, f"{r['rss1'] / 1024:.1f} MiB")]
    targets += [(name, ok, "yes" if ok else "NO") for name, ok in r["checks"]]
    mbps = lambda s: r["tar_size"] / MIB / s  # noqa: E731
    ncpu = os.cpu_count() or 1
    busy = [f"{n}: {own:.1f} CPU-s its own, {c:.1f} CPU-s of other processes over {w:.1f} s wall"
            for n, own, c, w in (("w1", r["own"][0], r["cpu"][0], r["w1"]),
                                 ("w2", r["own"][1], r["cpu"][1], r["w2"]))]
    quiet = all(c <= 0.1 * ncpu * w for c, w in ((r["cpu"][0], r["w1"]), (r["cpu"][1], r["w2"])))
    lines = [
        "# runner-patch benchmark: a wheel becomes a layer",
        "",
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; reproduce with "
        "`cargo build --release --locked --example layer_bench && bash bench/run.sh --only wheels` "
        "(see bench/README.md).",
        "",
        f"Machine: {machine}.",
        "",
        f"Wheel: {os.path.basename(r['wheel'])}, {r['wheel_size'] / MIB:.1f} MiB "
        f"({r['wheel_size']:,} B), {r['files'] / MIB:.1f} MiB of files; layer tar {r['tar_size'] / MIB:.1f} MiB, "
        f"gzip layer {r['out']['size'] / MIB:.1f} MiB ({r['out']['entries']} entries).",
        "",
        "| route | wall | MiB/s of tar | CPU | peak RSS |",
        "|---|---:|---:|---:|---:|",
        f"| w1. layer builder (inflate wheel, tar, gzip -6, both sha256, spooled) | {r['w1']:.2f} s "
        f"(build {r['out']['build_seconds']:.2f} s) | {mbps(r['w1']):.1f} | {r['own'][0]:.1f} s "
        f"| {r['rss1'] / 1024:.1f} MiB |",
        f"| w2. GNU `gzip -6` of the same tar | {r['w2']:.2f} s | {mbps(r['w2']):.1f} | {r['own'][1]:.1f} s "
        f"| {r['rss2'] / 1024:.1f} MiB |",
        "",
        f"Speed against gzip -6: {ratio:.2f}x by wall time, {r['own'][1] / max(r['own'][0], 1e-9):.2f}x by "
        "CPU time (the routes' own user + system seconds, which other processes disturb less).",
        "",
        "| target | result | value |",
        "|---|---|---|",
    ]
    lines += [f"| {n} | {'PASS' if ok else 'FAIL'} | {v} |" for n, ok, v in targets]
    lines += ["", f"CPU ({ncpu} CPUs): " + "; ".join(busy) + ". "
              + ("Quiet machine: other processes used under 10% of the CPUs during both routes."
                 if quiet else "NOT A QUIET MACHINE: other processes used more than 10% of the CPUs; "
                 "both routes shared the CPUs with them, so their ratio is the figure to read."), ""]
    return "\n".join(lines), targets


def machine_line():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    gz = subprocess.run(["gzip", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return f"nproc {os.cpu_count()}, {cpu}; {gz}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--example", default=os.path.join(ROOT, "target", "release", "examples", "layer_bench"))
    p.add_argument("--cache", default=image.default_cache())
    p.add_argument("--work", help="scratch folder (default: a new one under $TMPDIR, removed at the end)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    p.add_argument("--results", default=os.path.join(HERE, "results", "wheels-latest.md"))
    a = p.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if not os.access(a.example, os.X_OK):
        log(f"bench: {a.example} not found; build it: cargo build --release --locked --example layer_bench")
        return 2
    r = run(a, log)
    text, targets = report(r, machine_line())
    os.makedirs(os.path.dirname(a.results), exist_ok=True)
    with open(a.results, "w") as f:
        f.write(text)
    print(text)
    failed = [n for n, ok, _ in targets if not ok]
    print(f"{len(targets) - len(failed)} targets passed, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
