"""The benchmark's routes and targets for parallel range reads (issue 20), run by bench.py.

  a0. apply on localhost with one stream per layer (--range-parallel 0): today's reads, beside
      route a (the default, parallel ranges), so both are compared with the same floor;
  h.  apply through bench/throttle.py (every TCP connection limited to RATE) with one stream;
  i.  the same apply with parallel ranges (the default).

h and i write to two repositories of the same registry whose names have the same length
(the provenance statement names its target), from the same source through the same proxy, so
their images, and the bytes they push, must be the same.
"""

import json

from bench import throttle

RATE = 20_000_000  # bytes per second, per connection
REPO = "gpustack/runner"
TAG = "cuda12.9-vllm0.27.1"


def localhost_one_stream(b, snapshot, src, work):
    out = f"{work}/map-a0.json"
    return b.measure("apply_one_stream", "a0. apply, one stream (--range-parallel 0)", [
        snapshot, "-v", "apply", "--backend", "cuda", "--repository", src, "--tag", TAG,
        "--tag-suffix", "-bench0", "--manifest", out, "--no-cache", "--range-parallel", "0"])


def throttled(b, snapshot, addr, work, log):
    """Routes h and i; returns their rows (with `image`: what each digest map records)."""
    proc, via = throttle.start(addr, RATE)
    log(f"throttling proxy {via} -> {addr}, {RATE / 1e6:.0f} MB/s per connection")
    rows = {}
    try:
        for key, label, repo, extra in (
                ("throttled_one", f"h. throttled link ({RATE / 1e6:.0f} MB/s per connection): apply, one stream",
                 "runner-s1", ["--range-parallel", "0"]),
                ("throttled_ranges", f"i. throttled link ({RATE / 1e6:.0f} MB/s per connection): apply, parallel ranges",
                 "runner-p1", [])):
            out = f"{work}/map-{key}.json"
            row = b.measure(key, label, [
                snapshot, "-v", "apply", "--backend", "cuda", "--repository", f"{via}/{REPO}", "--tag", TAG,
                "--target-repository", f"{via}/gpustack/{repo}", "--tag-suffix", "-thr",
                "--manifest", out, "--no-cache"] + extra)
            row["image"] = _images(out)  # read now: the scratch folder goes before the report
            rows[key] = row
    finally:
        proc.terminate()
        proc.wait()
    return rows


def _images(path):
    """(outcome, image digest, [platform digests], bytes_to_push) from a digest map."""
    try:
        with open(path) as f:
            img = json.load(f)["images"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return (img["outcome"], img["patched_digest"], sorted(p["patched_digest"] or "" for p in img["platforms"]),
            img.get("bytes_to_push"))


def check(r):
    """[(name, ok, detail)] for the targets of issue 20."""
    out = []
    a, a0 = r.get("apply"), r.get("apply_one_stream")
    floors = [x for k, x in r.items() if k.startswith("floor_") and x["rc"] == 0]
    if a is not None and a["rc"] == 0 and floors:
        fl = min(floors, key=lambda x: x["wall"])
        ratio = a["wall"] / fl["wall"]
        one = f"; one stream (a0): {a0['wall']:.2f} s = {a0['wall'] / fl['wall']:.2f}x" if a0 else ""
        out.append(("localhost: apply with parallel ranges at or below 1.0x the floor", ratio <= 1.0,
                    f"{a['wall']:.2f} s / {fl['wall']:.2f} s ({fl['label']}) = {ratio:.2f}x{one}"))
    h, i = r.get("throttled_one"), r.get("throttled_ranges")
    if h is None or i is None:
        out.append(("throttled link: parallel ranges >= 3x faster than one stream", False, "not run"))
        return out
    ok = h["rc"] == 0 and i["rc"] == 0
    ratio = h["wall"] / i["wall"] if i["wall"] else 0
    out.append(("throttled link: parallel ranges >= 3x faster than one stream", ok and ratio >= 3,
                f"{h['wall']:.2f} s / {i['wall']:.2f} s = {ratio:.1f}x (exit {h['rc']}, {i['rc']})"))
    mh, mi = h["image"], i["image"]
    same = mh is not None and mh == mi and mh[0] == "patched"
    out.append(("throttled link: same patched digests, same bytes pushed", same and h["up"] == i["up"],
                f"one stream {mh}, parallel {mi}; uploaded {h['up']} B and {i['up']} B "
                f"({h['blob_puts']} and {i['blob_puts']} blob PUTs, {h['mounts']} and {i['mounts']} mounts); "
                f"downloaded {h['down']} B and {i['down']} B"))
    rh, ri = h.get("rss_kib", 0) / 1024, i.get("rss_kib", 0) / 1024
    out.append(("throttled link: peak RSS < 100 MiB in both", rh < 100 and ri < 100,
                f"one stream {rh:.1f} MiB, parallel ranges {ri:.1f} MiB"))
    return out
