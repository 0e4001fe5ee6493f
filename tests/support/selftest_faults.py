"""Checks every fault kind of fault_proxy.py against a real registry (run by selftest.sh).

    python3 -m tests.support.selftest_faults --registry 127.0.0.1:R --proxy 127.0.0.1:P --plan PLAN.json --log LOG

The proxy must have been started with the same PLAN.json (rewritten here per
check) and LOG. Exits non-zero on the first failed check.
"""

import argparse
import http.client
import json
import os
import time

from imagekit import sha256
from imagekit.media import ACCEPT

REPO = "selftest/faults"


def conn(addr):
    host, port = addr.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=20)


def call(addr, method, path, body=None, headers=None, c=None):
    c = c or conn(addr)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    return r, r.read()


def push_blob(addr, data):
    digest = sha256(data)
    r, _ = call(addr, "POST", f"/v2/{REPO}/blobs/uploads/")
    assert r.status == 202, r.status
    loc = r.getheader("Location").split("://", 1)[1].split("/", 1)[1]
    sep = "&" if "?" in loc else "?"
    r, _ = call(addr, "PUT", f"/{loc}{sep}digest={digest}", data,
                {"Content-Type": "application/octet-stream"})
    assert r.status == 201, r.status
    return digest


def check(name, cond, detail=""):
    print(f"{'ok  ' if cond else 'FAIL'} {name} {detail}", flush=True)
    if not cond:
        raise SystemExit(1)


def main():
    p = argparse.ArgumentParser()
    for a in ("--registry", "--proxy", "--plan", "--log"):
        p.add_argument(a, required=True)
    a = p.parse_args()
    reg, px = a.registry, a.proxy

    def plan(rules):
        with open(a.plan + ".tmp", "w") as f:
            json.dump(rules, f)
        os.replace(a.plan + ".tmp", a.plan)

    blob = os.urandom(300_000)
    bdig = push_blob(reg, blob)
    cfg = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
    cdig = push_blob(reg, cfg)
    man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                 "digest": cdig, "size": len(cfg)},
                      "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                  "digest": bdig, "size": len(blob)}]}).encode()
    r, _ = call(reg, "PUT", f"/v2/{REPO}/manifests/v1", man,
                {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    assert r.status == 201, r.status
    bpath, mpath = f"/v2/{REPO}/blobs/{bdig}", f"/v2/{REPO}/manifests/v1"

    plan([])
    c = conn(px)
    r1, b1 = call(px, "GET", bpath, c=c)
    r2, b2 = call(px, "GET", mpath, headers={"Accept": ACCEPT}, c=c)
    check("clean pass-through, keep-alive", r1.status == 200 and b1 == blob and r2.status == 200
          and b2 == man and r2.getheader("Docker-Content-Digest") is not None)

    plan([{"match": {"method": "GET", "path_regex": "/blobs/sha256:"},
           "fault": {"kind": "reset_after_bytes", "bytes": 100}}])
    got, err = b"", None
    try:
        c = conn(px)
        c.request("GET", bpath)
        r = c.getresponse()
        while chunk := r.read1(65536):
            got += chunk
    except (ConnectionError, http.client.IncompleteRead) as e:
        err = e
    check("reset_after_bytes: client error", err is not None and len(got) <= 100,
          f"{type(err).__name__} after {len(got)} bytes")

    plan([{"match": {"method": "GET", "path_regex": "/manifests/", "nth": [1, 2]},
           "fault": {"kind": "status", "code": 503, "headers": {"Retry-After": "1"}, "body": "busy"}}])
    codes = []
    for _ in range(3):
        r, body = call(px, "GET", mpath, headers={"Accept": ACCEPT})
        codes.append((r.status, r.getheader("Retry-After")))
    check("status 503 on nth 1,2 then success", codes == [(503, "1"), (503, "1"), (200, None)], codes)

    plan([{"match": {"path_regex": "/blobs/"}, "fault": {"kind": "truncate", "bytes": 50}}])
    c = conn(px)
    c.request("GET", bpath)
    r = c.getresponse()
    try:
        r.read()
        err = None
    except http.client.IncompleteRead as e:
        err = e
    check("truncate: real Content-Length, short body", r.getheader("Content-Length") == str(len(blob))
          and err is not None and len(err.partial) == 50, repr(err))

    plan([{"match": {"path_regex": "/blobs/"}, "fault": {"kind": "flip_byte", "offset": 123_456}}])
    r, body = call(px, "GET", bpath)
    check("flip_byte: same length, digest differs", r.status == 200 and len(body) == len(blob)
          and sha256(body) != bdig)

    plan([{"match": {"method": "GET", "path_regex": "^/v2/$"}, "fault": {"kind": "html", "code": 200}}])
    r, body = call(px, "GET", "/v2/")
    check("html: 200 text/html", r.status == 200 and r.getheader("Content-Type").startswith("text/html")
          and body.startswith(b"<!DOCTYPE html>"))

    plan([{"match": {"path_regex": "/manifests/"},
           "fault": {"kind": "drop_header", "name": "Docker-Content-Digest"}}])
    r, body = call(px, "GET", mpath, headers={"Accept": ACCEPT})
    check("drop_header", r.status == 200 and r.getheader("Docker-Content-Digest") is None and body == man)

    plan([{"match": {"path_regex": "/manifests/"}, "fault": {"kind": "add_header", "name": "OCI-Subject",
                                                             "value": "sha256:" + "0" * 64}}])
    r, body = call(px, "GET", mpath, headers={"Accept": ACCEPT})
    check("add_header", r.status == 200 and r.getheader("OCI-Subject") == "sha256:" + "0" * 64 and body == man)

    plan([{"match": {"path_regex": "/manifests/"}, "fault": {"kind": "content_type", "value": "text/plain"}}])
    r, body = call(px, "GET", mpath, headers={"Accept": ACCEPT})
    check("content_type", r.status == 200 and r.getheader("Content-Type") == "text/plain")

    plan([{"match": {"path_regex": "/manifests/"}, "fault": {"kind": "delay", "seconds": 1.0}}])
    t0 = time.monotonic()
    r, body = call(px, "GET", mpath, headers={"Accept": ACCEPT})
    check("delay", r.status == 200 and time.monotonic() - t0 >= 1.0, f"{time.monotonic() - t0:.2f}s")

    # Range faults: a registry that ignores Range, a wrong Content-Range, a stall mid-range.
    rng = {"Range": "bytes=1000-1999"}
    plan([])
    r, body = call(px, "GET", bpath, headers=rng)
    check("range: 206 passes through", r.status == 206 and body == blob[1000:2000]
          and r.getheader("Content-Range") == f"bytes 1000-1999/{len(blob)}")
    plan([{"match": {"path_regex": "/blobs/"}, "fault": {"kind": "ignore_range"}}])
    r, body = call(px, "GET", bpath, headers=rng)
    check("ignore_range: 200 with the whole blob", r.status == 200 and body == blob)
    plan([{"match": {"path_regex": "/blobs/"},
           "fault": {"kind": "set_header", "name": "Content-Range", "value": "bytes 0-999/300000"}}])
    r, body = call(px, "GET", bpath, headers=rng)
    check("set_header: Content-Range replaced, body unchanged", r.status == 206 and body == blob[1000:2000]
          and r.getheader("Content-Range") == "bytes 0-999/300000")
    plan([{"match": {"path_regex": "/blobs/", "headers": {"Range": "^bytes=1000-"}},
           "fault": {"kind": "status", "code": 500}}])
    codes = [call(px, "GET", bpath, headers=h)[0].status for h in (rng, {"Range": "bytes=0-9"}, {})]
    check("match on a header: only that range", codes == [500, 206, 200], codes)
    plan([{"match": {"path_regex": "/blobs/"}, "fault": {"kind": "stall_after_bytes", "bytes": 100}}])
    c = conn(px)
    c.timeout = 1.0
    c.request("GET", bpath, headers=rng)
    r = c.getresponse()
    got, err = b"", None
    try:
        while chunk := r.read1(65536):
            got += chunk
    except TimeoutError as e:
        err = e
    check("stall_after_bytes: N bytes, then silence", err is not None and got == blob[1000:1100],
          f"{type(err).__name__} after {len(got)} bytes")

    # A redirect to the other listener, good for two requests, then expired; no credentials
    # ever reach it from this client, and it needs none.
    plan([{"match": {"method": "GET", "path_regex": "/blobs/"}, "fault": {"kind": "redirect", "valid_for": 2}}])
    r, _ = call(px, "GET", bpath, headers=rng)
    loc = r.getheader("Location") or ""
    check("redirect: 307 to the other listener", r.status == 307 and "/_signed/" in loc
          and not loc.startswith(f"http://{px}/"), loc)
    other, path = loc.split("://", 1)[1].split("/", 1)
    got = [call(other, "GET", "/" + path, headers=rng) for _ in range(3)]
    check("redirect: the location serves the range twice, then 403",
          [g[0].status for g in got] == [206, 206, 403] and got[0][1] == blob[1000:2000],
          [g[0].status for g in got])

    # Uploads: Location rewritten to the proxy; a reset mid-body leaves no blob.
    plan([{"match": {"method": "PUT", "path_regex": "/blobs/uploads/"},
           "fault": {"kind": "reset_request_after_bytes", "bytes": 1000}}])
    data = os.urandom(200_000)
    dig = sha256(data)
    r, _ = call(px, "POST", f"/v2/{REPO}/blobs/uploads/")
    loc = r.getheader("Location")
    check("Location rewritten to the proxy", r.status == 202 and loc.startswith(f"http://{px}/"), loc)
    path = loc.split(px, 1)[1]
    err = None
    try:
        call(px, "PUT", f"{path}&digest={dig}", data, {"Content-Type": "application/octet-stream"})
    except (ConnectionError, http.client.HTTPException) as e:
        err = e
    time.sleep(0.3)
    r, _ = call(reg, "HEAD", f"/v2/{REPO}/blobs/{dig}")
    check("reset_request_after_bytes: client error, no blob", err is not None and r.status == 404,
          f"{type(err).__name__}, HEAD {r.status}")

    plan([])  # clean re-run through the same proxy, chunked PATCH then PUT
    r, _ = call(px, "POST", f"/v2/{REPO}/blobs/uploads/")
    path = r.getheader("Location").split(px, 1)[1]
    c = conn(px)
    c.request("PATCH", path, body=iter([data[:70_000], data[70_000:]]), encode_chunked=True,
              headers={"Content-Type": "application/octet-stream"})
    r = c.getresponse()
    r.read()
    path = r.getheader("Location").split(px, 1)[1]
    r, _ = call(px, "PUT", f"{path}&digest={dig}", b"", {"Content-Type": "application/octet-stream"})
    r2, _ = call(reg, "HEAD", f"/v2/{REPO}/blobs/{dig}")
    check("clean re-run after plan reload (chunked PATCH + PUT)", r.status == 201 and r2.status == 200,
          f"PUT {r.status}, HEAD {r2.status}")

    with open(a.log) as f:
        kinds = {(json.loads(x)["fault"] or {}).get("kind") for x in f}
    want = {"reset_after_bytes", "status", "truncate", "flip_byte", "html", "drop_header", "add_header",
            "content_type", "delay", "reset_request_after_bytes", "ignore_range", "set_header",
            "stall_after_bytes", "redirect", "signed", None}
    check("proxy log records every fault kind", want <= kinds, sorted(map(str, kinds)))


if __name__ == "__main__":
    main()
