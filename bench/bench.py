"""The runner-patch benchmark (issue 6): `make bench` -> bash bench/run.sh -> this module.

    python3 -m bench.bench --bin target/release/runner-patch [--work DIR] [--keep]
                           [--no-buildah] [--only ranges] [--results bench/results/latest.md]

On one synthetic two-platform image (bench/image.py) in a fresh local registry, measures with
/usr/bin/time -v, in this order:

  a. runner-patch apply (target tag <tag>-bench1)
  b. the floor: GET + inflate to /dev/null of exactly the layers apply scanned (from its digest
     map), platforms in parallel like apply; once with pigz -dc (if present), once with gzip -dc
  c. the rebuild routes: skopeo + umoci (bench/rebuild_umoci.sh), buildah (bench/rebuild_buildah.sh)
  d. runner-patch apply again, on <tag>-bench1 (already patched)
  e-g. plan, then apply, through a fresh scan cache (--cache-dir), then a plan after one cache
     entry was edited on disk (its layer must be read again); a and d run with --no-cache
  a0, h, i. parallel range reads (issue 20, bench/ranges.py): apply with one stream per layer on
     localhost, then apply through a proxy limiting each connection to 20 MB/s, with one
     stream and with parallel ranges

--only ranges runs a, b, a0, h and i alone and checks their targets.

Bytes moved come from the registry's own access log (see bench/README.md); the targets are
checked as ratios within this run; the table goes to stdout and to the results file.
Exit status: 0 when every target passes, 1 when one fails, 2 on an error.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
from bench import image  # noqa: E402
from bench import ranges  # noqa: E402
from bench import requirements  # noqa: E402
from bench import wheels  # noqa: E402
from fixtures import registry as fxreg  # noqa: E402

REPO = "gpustack/runner"
TAG = "cuda12.9-vllm0.27.1"
KIB, MIB = 1024, 1024 * 1024

# --- the registry's access log ------------------------------------------------

# distribution 2.8.2 writes, next to its logrus lines, one Apache "combined" line per request:
#   127.0.0.1 - - [30/Nov/2026:21:49:15 +0000] "GET /v2/x/y/blobs/sha256:... HTTP/1.1" 200 5 "" "curl/7.88.1"
# The size is the response body the handler wrote (for HEAD it is counted but never sent).
# No request size is logged anywhere, so uploads are counted from completed PUTs (see README).
ACCESS = re.compile(r'^\S+ \S+ \S+ \[[^\]]*\] "(\S+) (\S+) [^"]*" (\d{3}) (\d+|-)')
BLOB_UPLOAD = re.compile(r"^/v2/(.+)/blobs/uploads/([^/?]*)$")
MANIFEST = re.compile(r"^/v2/(.+)/manifests/([^/]+)$")


class Storage:
    """Reads blob sizes and tags from the registry's filesystem storage."""

    def __init__(self, root):
        self.v2 = os.path.join(root, "docker", "registry", "v2")

    def blobs(self):
        base = os.path.join(self.v2, "blobs", "sha256")
        if not os.path.isdir(base):
            return set()
        return {"sha256:" + h for d in os.listdir(base) for h in os.listdir(os.path.join(base, d))}

    def blob_size(self, digest):
        algo, hexd = digest.split(":", 1)
        return os.path.getsize(os.path.join(self.v2, "blobs", algo, hexd[:2], hexd, "data"))

    def tag_digest(self, repo, tag):
        p = os.path.join(self.v2, "repositories", repo, "_manifests", "tags", tag, "current", "link")
        with open(p) as f:
            return f.read().strip()


def account(log_path, start, storage, before):
    """Traffic of the requests logged after byte offset START of the access log."""
    with open(log_path, "rb") as f:
        f.seek(start)
        lines = f.read().decode("utf-8", "replace").splitlines()
    t = dict(requests=0, down=0, down_blobs=0, up=0, up_blobs=0, up_manifests=0, blob_puts=0,
             manifest_puts=0, patches=0, upload_sessions=0, mounts=0, reuploaded=0, unknown_sizes=0)
    for line in lines:
        m = ACCESS.match(line)
        if not m:
            continue
        method, uri, status = m[1], m[2], int(m[3])
        size = 0 if m[4] == "-" else int(m[4])
        t["requests"] += 1
        u = urllib.parse.urlsplit(uri)
        q = urllib.parse.parse_qs(u.query)
        if method == "GET":
            t["down"] += size
            if "/blobs/" in u.path:
                t["down_blobs"] += size
        elif method == "POST" and BLOB_UPLOAD.match(u.path):
            if "mount" in q and status == 201:
                t["mounts"] += 1
            elif status == 202:
                t["upload_sessions"] += 1
        elif method == "PATCH" and BLOB_UPLOAD.match(u.path):
            t["patches"] += 1
        elif method == "PUT" and status == 201 and BLOB_UPLOAD.match(u.path) and "digest" in q:
            digest = q["digest"][0]
            t["blob_puts"] += 1
            try:
                n = storage.blob_size(digest)
            except OSError:
                t["unknown_sizes"] += 1
                continue
            t["up"] += n
            t["up_blobs"] += n
            if digest in before:
                t["reuploaded"] += n
        elif method == "PUT" and status == 201 and MANIFEST.match(u.path):
            repo, ref = MANIFEST.match(u.path).groups()
            t["manifest_puts"] += 1
            try:
                digest = ref if ":" in ref else storage.tag_digest(repo, ref)
                n = storage.blob_size(digest)
            except OSError:
                t["unknown_sizes"] += 1
                continue
            t["up"] += n
            t["up_manifests"] += n
    return t


# --- measuring one route -----------------------------------------------------


def parse_time_v(path):
    out = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.strip().rpartition(": ")
            if k.startswith("Maximum resident set size"):
                out["rss_kib"] = int(v)
            elif k == "User time (seconds)":
                out["user"] = float(v)
            elif k == "System time (seconds)":
                out["sys"] = float(v)
            elif k.startswith("Exit status"):
                out["exit"] = int(v)
    return out


def busy_seconds():
    """CPU time spent by the whole machine so far (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = v[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def process_seconds(pid):
    """CPU time (user + system) of one process, from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def all_processes():
    """{pid: (name, CPU seconds)} of every process now running."""
    out, hz = {}, os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.find("(") + 1:raw.rfind(")")]
        fields = raw.rsplit(")", 1)[1].split()
        out[int(pid)] = (name, (int(fields[11]) + int(fields[12])) / hz)
    return out


def busiest(before, after, skip, n=3):
    """The long-running processes (other than SKIP) that used the most CPU between two snapshots."""
    used = {}
    for pid, (name, cpu) in after.items():
        if pid in before and pid not in skip:
            d = cpu - before[pid][1]
            if d > 0.2:
                used[name] = used.get(name, 0.0) + d
    return ", ".join(f"{k} {v:.1f} s" for k, v in sorted(used.items(), key=lambda kv: -kv[1])[:n])


class Bench:
    def __init__(self, work, regdir, registry_pid, log=print):
        self.work, self.regdir, self.registry_pid, self.log = work, regdir, registry_pid, log
        self.logfile = os.path.join(regdir, "registry.log")
        self.storage = Storage(os.path.join(regdir, "storage"))
        self.rows = []

    def measure(self, key, label, argv, note="", prepare=None):
        out, err, tv = (os.path.join(self.work, f"{key}.{x}") for x in ("out", "err", "time"))
        prepared = prepare() if prepare else None
        start = os.path.getsize(self.logfile)
        before = self.storage.blobs()
        self.log(f"--- {label}: {' '.join(argv)}")
        busy0, reg0, procs0 = busy_seconds(), process_seconds(self.registry_pid), all_processes()
        t = time.monotonic()
        with open(out, "wb") as o, open(err, "wb") as e:
            rc = subprocess.call(["/usr/bin/time", "-v", "-o", tv] + argv, stdout=o, stderr=e,
                                 stdin=subprocess.DEVNULL)
        wall = time.monotonic() - t
        busy, reg = busy_seconds() - busy0, process_seconds(self.registry_pid) - reg0
        seen = busiest(procs0, all_processes(), {self.registry_pid, os.getpid()})
        time.sleep(0.5)  # let the registry finish writing its log lines
        row = dict(key=key, label=label, argv=argv, rc=rc, wall=wall, note=note, out=out, err=err,
                   **parse_time_v(tv), **account(self.logfile, start, self.storage, before))
        # CPU of processes that are not this route nor the registry (a busy machine skews ratios).
        row["registry_cpu"] = reg
        row["other_cpu"] = max(0.0, busy - reg - row.get("user", 0) - row.get("sys", 0))
        row["other_seen"] = seen
        row["prepared"] = prepared
        row["layer_gets"] = layer_gets(self.logfile, start)
        self.log(f"    {wall:.2f} s, exit {rc}, peak RSS {row.get('rss_kib', 0) / 1024:.1f} MiB, "
                 f"down {fmt_bytes(row['down'])}, up {fmt_bytes(row['up'])}")
        if rc != 0:
            with open(err, errors="replace") as f:
                tail = f.read()[-2000:]
            self.log(f"    FAILED (exit {rc}); stderr tail:\n{tail}")
        self.rows.append(row)
        return row


def layer_gets(log_path, start):
    """{digest: bytes} of the blob GETs in the access log after offset START."""
    out = {}
    with open(log_path, errors="replace") as f:
        f.seek(start)
        for line in f:
            m = ACCESS.match(line)
            if m and m.group(1) == "GET" and "/blobs/sha256:" in m.group(2) and m.group(4) != "-":
                d = m.group(2).rsplit("/blobs/", 1)[1]
                out[d] = out.get(d, 0) + int(m.group(4))
    return out


def edit_cache_entry(scans):
    """Flips one byte in the middle of the scan cache entry of the biggest layer; returns that
    layer's digest (what the next plan must read again)."""
    best = None
    # The newest format's folder (`v<N>`); an entry is its JSON body, then a checksum line.
    folder = os.path.join(scans, max((d for d in os.listdir(scans) if d[1:].isdigit()), key=lambda d: int(d[1:])))
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if not name.endswith(".json"):
            continue
        with open(path, "rb") as f:
            body = json.loads(f.read().rstrip(b"\n").rsplit(b"\n", 1)[0])
        if best is None or body["size"] > best[1]:
            best = (path, body["size"], body["layer"])
    if best is None:
        raise RuntimeError(f"no scan cache entry in {folder}")
    with open(best[0], "rb") as f:
        data = bytearray(f.read())
    i = len(data) // 2
    data[i] = ord("B") if data[i] == ord("A") else ord("A")
    with open(best[0], "wb") as f:
        f.write(data)
    return best[2]


def fmt_bytes(n):
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", KIB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def floor_script(addr, plats, decoder):
    """A bash script: per platform, its scanned layers one after the other (top down), piped
    through DECODER; the platforms run in parallel (runner-patch scans them concurrently)."""
    lines = ["set -u -o pipefail",
             "layers() { for d in \"$@\"; do",
             f"  curl -sSf \"http://{addr}/v2/{REPO}/blobs/$d\" | {decoder} -dc > /dev/null || return 1",
             "done; }"]
    pids = []
    for i, (_, digests) in enumerate(plats):
        lines.append(f"layers {' '.join(digests)} & p{i}=$!")
        pids.append(f"wait $p{i}")
    lines.append(" && ".join(pids))
    return "\n".join(lines) + "\n"


def scanned_layers(img, digest_map):
    """[(platform, [layer digests top-down])] apply read, from its digest map when it has one."""
    plats = []
    by_plat = {}
    try:
        with open(digest_map) as f:
            m = json.load(f)
        for p in m["images"][0]["platforms"]:
            by_plat[p["platform"]] = p
    except (OSError, ValueError, KeyError, IndexError):
        pass
    for key, info in img["platforms"].items():
        layers = list(reversed(info["layers"]))
        rec = next((v for k, v in by_plat.items() if k.startswith(key)), None)
        if rec is not None:
            n = rec["layers_scanned"]
            want = rec["bytes_scanned"]
        else:  # apply failed: the layers down to the one holding the file (vllm, second from bottom)
            n = len(layers) - 1
            want = None
        chosen = layers[:n]
        got = sum(L["size"] for L in chosen)
        if want is not None and got != want:
            print(f"warning: {key}: layers_scanned={n} sum to {got} bytes, map says bytes_scanned={want}",
                  file=sys.stderr)
        plats.append((key, [L["digest"] for L in chosen]))
    # runner-patch reads a layer shared by several platforms once per run (the others wait for
    # that scan), so the floor reads each distinct blob once too.
    seen = set()
    deduped = []
    for key, digests in plats:
        mine = [d for d in digests if d not in seen]
        seen.update(mine)
        deduped.append((key, mine))
    return [(k, d) for k, d in deduped if d]


def machine(bin_info):
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip("\n")
        except (OSError, subprocess.SubprocessError):
            return "?"
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-").strip()
    return {
        "nproc": sh("nproc"),
        "cpu": cpu,
        "kernel": platform.release(),
        "free": sh("free -h"),
        "tools": {
            "runner-patch": bin_info,
            "skopeo": sh("skopeo --version"),
            "umoci": sh("umoci --version"),
            "buildah": sh("buildah --version 2>/dev/null") or "not installed",
            "docker-registry": sh("dpkg-query -W -f='${Version}' docker-registry 2>/dev/null"),
            "gzip": sh("gzip --version | head -1"),
            "igzip": sh("igzip --version 2>&1 | head -1") or "not installed",
            "pigz": sh("pigz --version 2>&1") or "not installed",
            "curl": sh("curl --version | head -1"),
        },
        "git": sh(f"git -C {ROOT} describe --always --dirty 2>/dev/null"),
    }


# --- targets and report -----------------------------------------------------


def check_targets(r, n_plat):
    """[(name, ok, detail)] for every target of issue 6."""
    out = []
    a, a2 = r.get("apply"), r.get("apply2")
    floors = [x for k, x in r.items() if k.startswith("floor_") and x["rc"] == 0]
    if a is None or a["rc"] != 0:
        out.append(("apply succeeded (exit 0, image patched)", False, f"exit {a and a['rc']}"))
        return out
    out.append(("apply succeeded (exit 0, image patched)", a.get("outcome") == "patched",
                f"outcome {a.get('outcome')}"))
    if floors:
        fl = min(floors, key=lambda x: x["wall"])
        ratio = a["wall"] / fl["wall"]
        out.append(("apply within 1.5x of the floor", ratio <= 1.5,
                    f"{a['wall']:.2f} s / {fl['wall']:.2f} s ({fl['label']}) = {ratio:.2f}x"))
    else:
        out.append(("apply within 1.5x of the floor", False, "no floor measured"))
    for k in ("umoci", "buildah"):
        if k in r:
            x = r[k]
            if x["rc"] != 0:
                out.append((f"apply >= 10x faster than {x['label']}", False, f"route failed (exit {x['rc']})"))
                continue
            ratio = x["wall"] / a["wall"]
            out.append((f"apply >= 10x faster than {x['label']}", ratio >= 10,
                        f"{x['wall']:.2f} s / {a['wall']:.2f} s = {ratio:.1f}x"))
    limit = 64 * KIB * n_plat
    ok = a["up"] <= limit and a["unknown_sizes"] == 0
    out.append(("apply uploads <= 64 KiB per platform", ok,
                f"{a['up']} B for {n_plat} platforms (limit {limit} B); {a['blob_puts']} blob PUTs, "
                f"{a['reuploaded']} B of blobs the registry already had, {a['mounts']} mounts"))
    rss = a.get("rss_kib", 0) / 1024
    out.append(("apply peak RSS < 100 MiB", rss < 100, f"{rss:.1f} MiB"))
    if a2 is None:
        out.append(("second apply < 5% of the first, no blob uploads", False, "not run"))
    else:
        frac = a2["wall"] / a["wall"]
        uploads = a2["upload_sessions"] + a2["blob_puts"] + a2["patches"] + a2["mounts"]
        ok = a2["rc"] == 0 and frac < 0.05 and uploads == 0 and a2.get("outcome") == "already-patched"
        out.append(("second apply < 5% of the first, no blob uploads", ok,
                    f"{a2['wall']:.2f} s = {100 * frac:.1f}% of {a['wall']:.2f} s; outcome "
                    f"{a2.get('outcome')}; {uploads} blob upload requests"))
    pc, ac, pe = r.get("plan_cached"), r.get("apply_cached"), r.get("plan_edited")
    if pc is None or ac is None:
        out.append(("apply after plan fetches < 1% of the plan's layer bytes", False, "not run"))
    else:
        plan_layers, apply_layers = sum(pc["layer_gets"].values()), sum(ac["layer_gets"].values())
        ok = (pc["rc"] == 0 and ac["rc"] == 0 and ac.get("outcome") == "patched"
              and plan_layers > 0 and ac["down"] < 0.01 * plan_layers)
        out.append(("apply after plan fetches < 1% of the plan's layer bytes", ok,
                    f"apply downloaded {ac['down']} B in all ({apply_layers} B of blobs) after a plan "
                    f"that read {fmt_bytes(plan_layers)} of blobs; outcome {ac.get('outcome')}"))
    if pe is None:
        out.append(("an edited cache entry is detected and its layer read again", False, "not run"))
    else:
        edited = pe.get("prepared")
        got = set(pe["layer_gets"])
        ok = pe["rc"] == 0 and edited in got and (pc is None or got <= set(pc["layer_gets"]))
        out.append(("an edited cache entry is detected and its layer read again", ok,
                    f"edited the entry of {edited}; the plan then fetched {len(got)} blob(s), "
                    f"{fmt_bytes(sum(pe['layer_gets'].values()))}"))
    return out


def table(rows, floor_wall):
    head = ("| route | wall | x floor | downloaded | uploaded | peak RSS | CPU | registry CPU | other CPU | exit |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    body = ""
    for x in rows:
        ratio = f"{x['wall'] / floor_wall:.2f}" if floor_wall else "-"
        body += (f"| {x['label']} | {x['wall']:.2f} s | {ratio} | {fmt_bytes(x['down'])} | {fmt_bytes(x['up'])} | "
                 f"{x.get('rss_kib', 0) / 1024:.1f} MiB | {x.get('user', 0) + x.get('sys', 0):.1f} s | "
                 f"{x['registry_cpu']:.1f} s | {x['other_cpu']:.1f} s | {x['rc']} |\n")
    return head + body


def report(ctx, rows, targets, floor_wall):
    m = ctx["machine"]
    img = ctx["image"]
    lines = [
        "# runner-patch benchmark: latest results",
        "",
        f"Run {ctx['date']} at commit `{m['git']}`; reproduce with "
        + ("`cargo build --release --locked && bash bench/run.sh --only ranges` (routes a, b, a0, h and i "
           "only; see bench/README.md)." if ctx.get("only") else
           "`make bench` (= `cargo build --release --locked && bash bench/run.sh`; see bench/README.md)."),
        "",
        "## Machine",
        "",
        f"- nproc: {m['nproc']}; CPU: {m['cpu']}; kernel: {m['kernel']}",
        "- free -h:",
        "",
        "```",
        m["free"],
        "```",
        "",
        "- " + "; ".join(f"{k}: {v}" for k, v in m["tools"].items()),
        "",
        "## Image",
        "",
        f"`{REPO}:{TAG}`, Docker v2 manifest list, linux/amd64 + linux/arm64/v8 (Docker v2 children, "
        f"gzip level {image.LEVEL} layers), {img['uncompressed'] / (1 << 30):.2f} GiB uncompressed per "
        f"platform, {fmt_bytes(img['compressed'])} compressed per platform; layers (bottom to top): "
        + ", ".join(f"{L['name']} {fmt_bytes(L['uncompressed'])} -> {fmt_bytes(L['size'])}"
                    for L in img["layers"]) + ".",
        f"Layer files {'generated in ' + format(ctx['generate_seconds'], '.1f') + ' s' if ctx['generated'] else 'from the cache'}; "
        f"pushed to a fresh registry in {ctx['push_seconds']:.1f} s.",
        "",
        "## Results",
        "",
        table(rows, floor_wall),
        "x floor: wall time over the fastest floor row. Bytes from the registry's access log "
        "(downloads: GET response sizes; uploads: sizes in the registry's storage of the blobs and "
        "manifests whose PUT completed). Peak RSS: largest single process (`/usr/bin/time -v`). CPU: "
        "user+sys of the route's processes; registry CPU: the registry process during the route; "
        "other CPU: everything else on the machine during the route (/proc/stat).",
        "",
        "## Targets",
        "",
    ]
    for name, ok, detail in targets:
        lines.append(f"- **{'PASS' if ok else 'FAIL'}** {name}: {detail}")
    lines += ["", "## Notes", ""] + [f"- {n}" for n in ctx["notes"]]
    lines += ["", f"Whole run (bench.py, including generation and push): {ctx['total']:.0f} s.", ""]
    return "\n".join(lines)


def outcome_of(path):
    try:
        with open(path) as f:
            return json.load(f)["images"][0]["outcome"]
    except (OSError, ValueError, KeyError, IndexError):
        return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "runner-patch"))
    p.add_argument("--work", help="scratch folder (default: a new one under $TMPDIR, removed at the end)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder and its registry data")
    p.add_argument("--no-buildah", action="store_true", help="skip the buildah route")
    p.add_argument("--only", choices=["ranges", "wheels", "requirements"],
                   help="ranges: only apply, the floor and the parallel-range routes (a, b, a0, h, i); "
                        "wheels: only the wheel-to-layer routes (w1, w2; bench/wheels.py); "
                        "requirements: only the requirements route (q1-q5; bench/requirements.py)")
    p.add_argument("--cache", default=image.default_cache())
    p.add_argument("--results", default=os.path.join(HERE, "results", "latest.md"))
    a = p.parse_args(argv)
    if a.only == "wheels":
        return wheels.main(["--cache", a.cache] + (["--keep"] if a.keep else []))
    if a.only == "requirements":
        return requirements.main(["--bin", a.bin, "--cache", a.cache] + (["--keep"] if a.keep else []))
    t_start = time.monotonic()
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    binary = os.path.abspath(a.bin)
    if not os.access(binary, os.X_OK):
        log(f"bench: {binary} not found; build it first (cargo build --release)")
        return 2
    if not os.access("/usr/bin/time", os.X_OK):
        log("bench: /usr/bin/time not found; install the Debian package `time`")
        return 2
    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="runner-patch-bench.")
    os.makedirs(work, exist_ok=True)
    regdir = os.path.join(work, "registry")
    # Measure a copy: a rebuild of target/ during the run must not swap binaries between routes.
    snapshot = os.path.join(work, "runner-patch")
    shutil.copy2(binary, snapshot)
    built = datetime.datetime.fromtimestamp(os.path.getmtime(snapshot), datetime.timezone.utc)
    version = subprocess.run([snapshot, "--version"], capture_output=True, text=True).stdout.strip()
    bin_info = f"{version} (binary built {built:%Y-%m-%d %H:%M:%S} UTC)"
    notes = []
    r = {}
    try:
        addr, reg_pid = fxreg.start(regdir)
        log(f"registry {addr} (data in {regdir})")
        layer_dir, layers, gen_s, cached = image.generate(a.cache, log)
        pushed = image.push(addr, REPO, TAG, layer_dir, layers, log)
        b = Bench(work, regdir, reg_pid, log)
        src = f"{addr}/{REPO}"

        # a. apply
        map1 = os.path.join(work, "map1.json")
        r["apply"] = b.measure("apply", "a. runner-patch apply", [
            snapshot, "-v", "apply", "--backend", "cuda", "--repository", src, "--tag", TAG,
            "--tag-suffix", "-bench1", "--digest-map", map1, "--no-cache"])
        r["apply"]["outcome"] = outcome_of(map1)

        # b. the floor
        plats = scanned_layers(pushed, map1)
        decoders = [d for d in ("igzip", "pigz", "gzip") if shutil.which(d)]
        for dec in decoders:
            script = os.path.join(work, f"floor-{dec}.sh")
            with open(script, "w") as f:
                f.write(floor_script(addr, plats, dec))
            r[f"floor_{dec}"] = b.measure(f"floor_{dec}", f"b. floor: curl \\| {dec} -dc", ["bash", script])
        for dec, pkg in (("igzip", "isal"), ("pigz", "pigz")):
            if dec not in decoders:
                notes.append(f"{dec} (Debian {pkg}) not installed: no floor row for it; the floor is the "
                             "fastest decoder present, so a missing fast one makes it looser.")
        r["apply_one_stream"] = ranges.localhost_one_stream(b, snapshot, src, work)
        if a.only == "ranges":
            r.update(ranges.throttled(b, snapshot, addr, work, log))
            raise Finished()

        # c. rebuild routes
        r["umoci"] = b.measure("umoci", "c. rebuild: skopeo + umoci", [
            "bash", os.path.join(HERE, "rebuild_umoci.sh"), addr, REPO, TAG, f"{TAG}-rebuild-umoci",
            os.path.join(work, "umoci")])
        shutil.rmtree(os.path.join(work, "umoci"), ignore_errors=True)
        if a.no_buildah:
            notes.append("buildah route skipped (--no-buildah).")
        elif not shutil.which("buildah"):
            notes.append("buildah route skipped: buildah is not installed.")
        else:
            bw = os.path.join(work, "buildah")
            r["buildah"] = b.measure("buildah", "c. rebuild: buildah", [
                "bash", os.path.join(HERE, "rebuild_buildah.sh"), addr, REPO, TAG, f"{TAG}-rebuild-buildah", bw])
            cleanup_buildah(bw, log)
            if r["buildah"]["rc"] != 0:
                notes.append("the buildah route failed here (see its stderr with --keep); it is "
                             "reported as failed, not as a measurement.")

        # d. apply on the already patched tag
        map2 = os.path.join(work, "map2.json")
        r["apply2"] = b.measure("apply2", "d. apply again (already patched)", [
            snapshot, "apply", "--backend", "cuda", "--repository", src, "--tag", f"{TAG}-bench1",
            "--digest-map", map2, "--no-cache"])
        r["apply2"]["outcome"] = outcome_of(map2)

        # e-g. plan -> apply through a fresh scan cache, then a plan with one entry edited
        scans = os.path.join(work, "scans")
        cached = [snapshot, "-v", "--backend", "cuda", "--repository", src, "--tag", TAG,
                  "--cache-dir", scans]
        r["plan_cached"] = b.measure("plan_cached", "e. plan (fills the scan cache)",
                                     [cached[0], "plan"] + cached[1:] + ["--tag-suffix", "-bench2"])
        map3 = os.path.join(work, "map3.json")
        r["apply_cached"] = b.measure("apply_cached", "f. apply after plan (scan cache)",
                                      [cached[0], "apply"] + cached[1:] + ["--tag-suffix", "-bench2",
                                                                           "--digest-map", map3])
        r["apply_cached"]["outcome"] = outcome_of(map3)
        r["plan_edited"] = b.measure("plan_edited", "g. plan, one cache entry edited on disk",
                                     [cached[0], "plan"] + cached[1:] + ["--tag-suffix", "-bench3"],
                                     prepare=lambda: edit_cache_entry(scans))

        # h-i. the throttled link
        r.update(ranges.throttled(b, snapshot, addr, work, log))
    except Finished:
        notes.append("--only ranges: routes c-g not run, and their targets not checked.")
    except Exception as e:  # noqa: BLE001
        log(f"bench: error: {type(e).__name__}: {e}")
        return 2
    finally:
        fxreg.stop(regdir)
        if not a.keep and not a.work:
            shutil.rmtree(work, ignore_errors=True)
        elif a.keep:
            log(f"kept {work}")

    floors = [x for k, x in r.items() if k.startswith("floor_") and x["rc"] == 0]
    floor_wall = min((x["wall"] for x in floors), default=None)
    amd = pushed["platforms"]["linux/amd64"]["layers"]
    notes += [
        "runner-patch scans the platforms of an index concurrently (one task per child manifest), "
        "each platform's layers one after another from the top; the floor does the same: one "
        "`curl | decoder` chain per platform, both chains in parallel.",
        f"Floor layers (from the digest map's layers_scanned, each distinct blob once): "
        + "; ".join(f"{k}: {len(d)} layers" for k, d in plats) + ".",
        "The amd64 and arm64 images share the big vllm layer and the small top layers; their base "
        "layers differ. runner-patch reads a layer shared by several platforms once per run (the "
        "other platforms wait for that scan); the floor reads each distinct blob once as well.",
        "Uploads: distribution 2.8.2 logs no request sizes, so a blob upload counts the size of the "
        "blob its completing `PUT ...?digest=` named (chunks sent by PATCH included), and a manifest "
        "PUT the size of the manifest stored under its reference, both read from the registry's "
        "storage. Blob mounts count 0 bytes and are listed in the targets.",
        "The umoci route pushes its index with a few lines of Python (skopeo and umoci cannot make "
        "one); the buildah route uses `buildah manifest`.",
    ]
    img_info = {"layers": amd, "uncompressed": sum(L["uncompressed"] for L in amd),
                "compressed": sum(L["size"] for L in amd)}
    rows = [r[k] for k in ("apply", "floor_igzip", "floor_pigz", "floor_gzip", "apply_one_stream", "umoci",
                           "buildah", "apply2", "plan_cached", "apply_cached", "plan_edited", "throttled_one",
                           "throttled_ranges")
            if k in r]
    ncpu = os.cpu_count() or 1
    busy = [f"{x['label']} ({x['other_cpu']:.1f} CPU-s over {x['wall']:.1f} s"
            + (f"; long-running: {x['other_seen']}" if x["other_seen"] else "") + ")" for x in rows
            if x["other_cpu"] > 0.1 * ncpu * x["wall"] and x["other_cpu"] > 0.5]
    if busy:
        notes.append("NOT A QUIET MACHINE: other processes used more than 10% of the CPUs during "
                     + "; ".join(busy) + ". Ratios may be off; rerun when the machine is idle.")
    else:
        notes.append("Quiet machine: other processes used under 10% of the CPUs during every route.")
    targets = check_targets(r, len(pushed["platforms"]))
    if a.only:
        targets = [t for t in targets if t[2] != "not run"]
    targets += ranges.check(r)
    notes.append(f"Throttled link (h, i): bench/throttle.py between the tool and the registry, every TCP "
                 f"connection paced to {ranges.RATE / 1e6:.0f} MB/s each way, as many connections as asked "
                 "for; both routes push into their own repository of the same registry (names of equal "
                 "length), so their images and uploads compare byte for byte.")
    ctx = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               machine=machine(bin_info), image=img_info, generated=not cached, generate_seconds=gen_s,
               push_seconds=pushed["push_seconds"], notes=notes, total=time.monotonic() - t_start,
               only=a.only)
    text = report(ctx, rows, targets, floor_wall)
    os.makedirs(os.path.dirname(a.results), exist_ok=True)
    with open(a.results, "w") as f:
        f.write(text)
    print(text)
    failed = [n for n, ok, _ in targets if not ok]
    print(f"{len(targets) - len(failed)} targets passed, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""))
    rc = 1 if failed else 0
    if not a.only:
        # The wheel-to-layer routes (issue 18) report on their own page.
        rc = max(rc, wheels.main(["--cache", a.cache] + (["--keep"] if a.keep else [])))
        # The requirements route (issue 37) reports on its own page too.
        rc = max(rc, requirements.main(["--bin", a.bin, "--cache", a.cache] + (["--keep"] if a.keep else [])))
    return rc


class Finished(Exception):
    """The routes asked for (--only) have run."""


def cleanup_buildah(bw, log):
    """Removes the buildah route's storage (unmounting its overlay layers first)."""
    if not os.path.isdir(bw):
        return
    base = ["buildah", "--root", os.path.join(bw, "root"), "--runroot", os.path.join(bw, "run"),
            "--storage-driver", "overlay"]
    for args in (["umount", "-a"], ["rm", "-a"], ["rmi", "-a", "-f"]):
        subprocess.run(base + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open("/proc/self/mounts") as f:
        mounted = [line.split()[1] for line in f if line.split()[1].startswith(bw + "/")]
    for mnt in sorted(mounted, reverse=True):
        subprocess.run(["umount", mnt], stderr=subprocess.DEVNULL)
    with open("/proc/self/mounts") as f:
        if any(line.split()[1].startswith(bw + "/") for line in f):
            log(f"warning: mounts left under {bw}; not removing it")
            return
    shutil.rmtree(bw, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
