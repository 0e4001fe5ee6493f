"""Fault-injecting HTTP/1.1 reverse proxy in front of a local registry.

    python3 -m tests.support.fault_proxy --upstream 127.0.0.1:PORT --plan PLAN.json [--log FILE]
                                         [--user U --password P] [--port N] [--lifetime SECONDS]

Forwards every request to the upstream and streams bodies both ways (no
body is held in memory). Client side: persistent connections (keep-alive)
unless the client asks for `Connection: close` or a fault ends the connection.
Upstream side: one new connection per request, sent with `Connection: close`
and `Host: UPSTREAM`; `Location` headers pointing at the upstream are rewritten
to the proxy, `WWW-Authenticate` passes unchanged. `Expect: 100-continue` is
answered by the proxy itself. Chunked bodies are decoded and re-chunked.

PLAN.json is a list of rules {"match": {"method", "path_regex", "headers", "nth"},
"fault"}. `path_regex` is searched in the request target (path and query);
`headers` maps header names to regexes searched in their values (a missing
header does not match); `nth` is a list of 1-based counts of the requests
matching method, path_regex and headers (omit: every one). Each rule counts on its own; the first rule whose nth fits wins.
The file is re-read on every request; when its content changes the rules and
counters start afresh (a parse error keeps the old plan). Fault kinds:
reset_after_bytes, status, truncate, flip_byte, reset_request_after_bytes,
html, drop_header, add_header, set_header, content_type, delay, hold,
stall_after_bytes, ignore_range, redirect -- see README.md for each one.

A second listener, `elsewhere` (another origin, as a CDN is), serves what a
`redirect` fault points at: `/_signed/<id>/<original target>`, forwarded upstream
for as many requests as the redirect allowed, 403 after that (a signed URL that
expired). With --user/--password the proxy's own listener wants those Basic
credentials (401 otherwise); `elsewhere` never asks.

--log FILE gets one JSON line per request: listener, method, path, range (the
Range header), authorization (whether one came), status, content_range, fault,
rule, nth, req_bytes, resp_bytes, outcome, error.
Ready-line: {"addr", "elsewhere", "upstream"}.
"""

import argparse
import asyncio
import base64
import json
import os
import re
import signal
import socket
import struct
import sys
import threading
import time

from tests.support import _common

HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
       "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "expect"}
TIMEOUT = 60.0
CHUNK = 64 * 1024
HTML = b"<!DOCTYPE html><html><head><title>Proxy</title></head><body><h1>Welcome</h1></body></html>"
EXPIRED = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
           "<Message>Request has expired</Message></Error>")


class Plan:
    def __init__(self, path, log):
        self.path, self.log, self.raw, self.rules, self.counts = path, log, None, [], []

    def pick(self, method, target, headers=()):
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except OSError:
            raw = b"[]"
        if raw != self.raw:
            try:
                rules = json.loads(raw or b"[]")
                for r in rules:
                    r["_re"] = re.compile(r.get("match", {}).get("path_regex", ""))
                    r["_hre"] = {k: re.compile(v) for k, v in r.get("match", {}).get("headers", {}).items()}
                self.raw, self.rules, self.counts = raw, rules, [0] * len(rules)
                self.log.info("plan loaded: %d rule(s)", len(rules))
            except (ValueError, TypeError, AttributeError, re.error) as e:
                self.log.error("plan %s unreadable, keeping the old one: %s", self.path, e)
        chosen = (None, None, None)
        for i, r in enumerate(self.rules):
            m = r.get("match", {})
            if m.get("method") and m["method"].upper() != method:
                continue
            if not r["_re"].search(target):
                continue
            if any(not rx.search(get(headers, k) or "\0") for k, rx in r["_hre"].items()):
                continue
            self.counts[i] += 1
            nths = [m["nth"]] if isinstance(m.get("nth"), int) else m.get("nth")
            if chosen[0] is None and (nths is None or self.counts[i] in nths):
                chosen = (i, self.counts[i], r["fault"])
        return chosen


class Reset(Exception):
    """Abort the client connection with a TCP RST."""


def rst(writer):
    try:
        writer.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except (OSError, AttributeError):
        pass
    writer.transport.abort()


async def read_head(reader, timeout=TIMEOUT):
    try:
        data = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    except asyncio.IncompleteReadError as e:
        if e.partial.strip():
            raise ConnectionError("connection closed inside a header block")
        return None
    lines = data.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers.append((k.strip(), v.strip()))
    return lines[0], headers


def get(headers, name):
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def framing(headers, no_body=False):
    if no_body:
        return ("none", 0)
    if "chunked" in (get(headers, "Transfer-Encoding") or "").lower():
        return ("chunked", None)
    cl = get(headers, "Content-Length")
    if cl is not None:
        return ("length", int(cl))
    return ("eof", None)


async def body_chunks(reader, fr):
    kind, n = fr
    if kind == "length":
        while n > 0:
            data = await asyncio.wait_for(reader.read(min(n, CHUNK)), TIMEOUT)
            if not data:
                raise ConnectionError("body ended early")
            n -= len(data)
            yield data
    elif kind == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                return
            yield await asyncio.wait_for(reader.readexactly(size), TIMEOUT)
            await reader.readexactly(2)
    elif kind == "eof":
        while data := await asyncio.wait_for(reader.read(CHUNK), TIMEOUT):
            yield data


def encode(fr, data):
    return b"%x\r\n%s\r\n" % (len(data), data) if fr[0] == "chunked" else data


def head_bytes(first, headers):
    return (first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode("latin-1")


class Proxy:
    def __init__(self, args, log):
        self.up_host, _, port = args.upstream.rpartition(":")
        self.up_port, self.upstream = int(port), args.upstream
        self.plan, self.log, self.addr, self.elsewhere = Plan(args.plan, log), log, None, None
        self.logfh, self.lock = (open(args.log, "a") if args.log else None), threading.Lock()
        self.basic = None
        if args.user is not None:
            pair = f"{args.user}:{args.password or ''}".encode()
            self.basic = "Basic " + base64.b64encode(pair).decode()
        # Signed locations handed out by `redirect`: id -> [requests allowed, requests made].
        self.signed, self.next_id = {}, 0

    async def client(self, reader, writer, listener="registry"):
        writer.transport.set_write_buffer_limits(0)
        try:
            while await self.exchange(reader, writer, listener):
                pass
            writer.close()
        except Reset:
            await asyncio.sleep(0.05)  # let the bytes already written reach the peer
            rst(writer)
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
            self.log.info("connection ended: %r", e)
            writer.transport.abort()

    async def exchange(self, creader, cwriter, listener):
        head = await read_head(creader, timeout=120)
        if head is None:
            return False
        first, headers = head
        method, target, version = first.split(" ", 2)
        auth = get(headers, "Authorization")
        rule, nth, fault = None, None, None
        if listener == "elsewhere":
            fault = self.signed_fault(target)
        elif self.basic is not None and auth != self.basic:
            fault = {"kind": "status", "code": 401,
                     "headers": {"WWW-Authenticate": 'Basic realm="fault-proxy"'}}
        else:
            rule, nth, fault = self.plan.pick(method, target, headers)
        kind = (fault or {}).get("kind")
        rec = {"time": time.time(), "listener": listener, "method": method, "path": target,
               "range": get(headers, "Range"), "authorization": auth is not None,
               "rule": rule, "nth": nth, "fault": fault, "status": None, "content_range": None,
               "req_bytes": 0, "resp_bytes": 0, "outcome": "ok", "error": None}
        keep = version == "HTTP/1.1" and (get(headers, "Connection") or "").lower() != "close"
        expect = (get(headers, "Expect") or "").lower() == "100-continue"
        req_fr = framing(headers)
        if req_fr[0] == "eof":
            req_fr = ("none", 0)
        try:
            if kind == "redirect":
                fault = self.sign(fault, target)
                kind = "status"
            if kind == "signed":
                target = fault["target"]
                headers = [(k, v) for k, v in headers if k.lower() != "authorization"]
            if kind in ("status", "html"):
                return await self.local(cwriter, creader, fault, req_fr, expect, keep, rec)
            if kind == "delay":
                await asyncio.sleep(float(fault.get("seconds", 1)))
            if kind == "hold" and fault.get("release"):
                await self.hold_until_released(fault)
            elif kind == "hold" and not fault.get("after_upstream"):
                rec["outcome"] = "held"
                await self.hold(creader, fault)
                return False
            return await self.forward(creader, cwriter, method, target, headers, req_fr,
                                      expect, keep, fault or {}, rec)
        except Reset:
            raise
        except Exception as e:
            rec.update(outcome="error", error=repr(e))
            raise
        finally:
            rec["duration"] = round(time.time() - rec["time"], 4)
            if self.logfh:
                _common.write_jsonl(self.lock, self.logfh, rec)

    async def local(self, cwriter, creader, fault, req_fr, expect, keep, rec):
        if expect:
            keep = False  # the client never sends the body
        elif req_fr[0] != "none":
            async for data in body_chunks(creader, req_fr):
                rec["req_bytes"] += len(data)
        if fault["kind"] == "html":
            code, hdrs, body = int(fault.get("code", 200)), {"Content-Type": "text/html; charset=utf-8"}, HTML
        else:
            code, hdrs = int(fault.get("code", 503)), dict(fault.get("headers", {}))
            body = fault.get("body", "").encode()
        hdrs.update({"Content-Length": str(len(body)), "Connection": "keep-alive" if keep else "close"})
        cwriter.write(head_bytes(f"HTTP/1.1 {code} Injected", list(hdrs.items())) + body)
        await cwriter.drain()
        rec.update(status=code, resp_bytes=len(body), outcome="local")
        return keep

    async def forward(self, creader, cwriter, method, target, headers, req_fr, expect, keep, fault, rec):
        kind = fault.get("kind")
        ureader, uwriter = await asyncio.wait_for(
            asyncio.open_connection(self.up_host, self.up_port), TIMEOUT)
        try:
            dropped = HOP | {"host", "content-length"} | ({"range"} if kind == "ignore_range" else set())
            fwd = [(k, v) for k, v in headers if k.lower() not in dropped]
            fwd.append(("Host", self.upstream))
            fwd.append(("Connection", "close"))
            if req_fr[0] == "length":
                fwd.append(("Content-Length", str(req_fr[1])))
            elif req_fr[0] == "chunked":
                fwd.append(("Transfer-Encoding", "chunked"))
            uwriter.write(head_bytes(f"{method} {target} HTTP/1.1", fwd))
            if expect:
                cwriter.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            limit = int(fault["bytes"]) if kind == "reset_request_after_bytes" else None
            sender = asyncio.create_task(self.send_body(creader, uwriter, req_fr, limit, rec))
            if limit is not None:
                if await sender:  # limit reached mid-body: drop both ends
                    rec["outcome"] = "request_reset"
                    raise Reset()
            head_task = asyncio.create_task(read_head(ureader))
            await asyncio.wait({sender, head_task}, return_when=asyncio.FIRST_COMPLETED)
            if sender.done() and sender.exception():  # client went away mid-body
                head_task.cancel()
                raise sender.exception()
            resp = await head_task
            if resp is None:
                raise ConnectionError("upstream closed without a response")
            if kind == "hold" and not fault.get("release"):  # applied upstream; no answer
                async for _ in body_chunks(ureader, framing(resp[1], method == "HEAD")):
                    pass
                rec.update(status=int(resp[0].split(" ")[1]), outcome="held")
                await self.hold(creader, fault)
                return False
            if limit is not None:  # body shorter than the limit: request done, response lost
                async for _ in body_chunks(ureader, framing(resp[1], method == "HEAD")):
                    pass
                rec.update(status=int(resp[0].split(" ")[1]), outcome="response_lost")
                raise Reset()
            if not sender.done():
                await asyncio.wait({sender}, timeout=1.0)
            if not sender.done():  # upstream answered before reading the whole body
                sender.cancel()
                keep = False
            elif sender.exception():
                raise sender.exception()
            return await self.respond(ureader, creader, cwriter, method, resp, keep, fault, rec)
        finally:
            uwriter.transport.abort()

    def sign(self, fault, target):
        """A `redirect` fault as the local 307 it answers: a new signed location on the
        `elsewhere` listener, good for `valid_for` requests."""
        self.next_id += 1
        self.signed[self.next_id] = [int(fault.get("valid_for", 1000000)), 0]
        location = f"http://{self.elsewhere}/_signed/{self.next_id}{target}"
        return {"kind": "status", "code": int(fault.get("code", 307)), "headers": {"Location": location}}

    def signed_fault(self, target):
        """What the `elsewhere` listener does with a request: forward it upstream (as its
        original target) while its signature is good, else 403 (expired) or 404 (unknown)."""
        m = re.match(r"^/_signed/(\d+)(/.*)$", target)
        entry = self.signed.get(int(m.group(1))) if m else None
        if entry is None:
            return {"kind": "status", "code": 404}
        if entry[1] >= entry[0]:
            return {"kind": "status", "code": 403, "body": EXPIRED,
                    "headers": {"Content-Type": "application/xml"}}
        entry[1] += 1
        return {"kind": "signed", "target": m.group(2)}

    async def hold(self, creader, fault):
        """Signal that the request arrived (by creating the `signal` file), then answer nothing
        until the client goes away: a test kills the client at exactly this request."""
        self.signal(fault)
        while await creader.read(65536):
            pass

    async def hold_until_released(self, fault):
        """Signal the request's arrival, then forward it once the `release` file exists: a
        test changes the world (fills a disk, say) at exactly this point of the client's run."""
        self.signal(fault)
        while not os.path.exists(fault["release"]):
            await asyncio.sleep(0.02)

    @staticmethod
    def signal(fault):
        path = fault.get("signal")
        if path:
            with open(path + ".tmp", "w") as fh:
                fh.write(str(time.time()))
            os.replace(path + ".tmp", path)

    async def send_body(self, creader, uwriter, fr, limit, rec):
        """Stream the request body upstream; True when `limit` bytes were cut off."""
        async for data in body_chunks(creader, fr):
            if limit is not None and rec["req_bytes"] + len(data) >= limit:
                data = data[:limit - rec["req_bytes"]]
                uwriter.write(encode(fr, data) if data else b"")
                rec["req_bytes"] += len(data)
                await uwriter.drain()
                return True
            uwriter.write(encode(fr, data))
            rec["req_bytes"] += len(data)
            await uwriter.drain()
        if fr[0] == "chunked":
            uwriter.write(b"0\r\n\r\n")
        await uwriter.drain()
        return False

    async def respond(self, ureader, creader, cwriter, method, resp, keep, fault, rec):
        kind = fault.get("kind")
        first, headers = resp
        status = int(first.split(" ")[1])
        rec["status"] = status
        fr = framing(headers, method == "HEAD" or status in (204, 304) or status < 200)
        out = []
        for k, v in headers:
            lk = k.lower()
            if lk in HOP or (kind == "drop_header" and lk == fault["name"].lower()):
                continue
            if lk == "location" and v.startswith(f"http://{self.upstream}"):
                v = f"http://{self.addr}" + v[len(f"http://{self.upstream}"):]
            if lk == "content-type" and kind == "content_type":
                v = fault["value"]
            if kind == "set_header" and lk == fault["name"].lower():
                continue
            out.append((k, v))
        if kind == "content_type" and get(headers, "Content-Type") is None:
            out.append(("Content-Type", fault["value"]))
        if kind == "set_header":
            out.append((fault["name"], fault["value"]))
        rec["content_range"] = get(out, "Content-Range")
        if kind == "add_header":
            out.append((fault["name"], fault["value"]))
        if fr[0] == "chunked":
            out.append(("Transfer-Encoding", "chunked"))
        if fr[0] == "eof" or kind in ("reset_after_bytes", "truncate"):
            keep = False
        out.append(("Connection", "keep-alive" if keep else "close"))
        cwriter.write(head_bytes(first, out))
        cut = int(fault["bytes"]) if kind in ("reset_after_bytes", "truncate", "stall_after_bytes") else None
        flip = int(fault["offset"]) if kind == "flip_byte" else None
        pos = 0
        async for data in body_chunks(ureader, fr):
            if flip is not None and pos <= flip < pos + len(data):
                b = bytearray(data)
                b[flip - pos] ^= 0xFF
                data, rec["outcome"] = bytes(b), "flipped"
            if cut is not None and pos + len(data) >= cut:
                data = data[:cut - pos]
                if data:
                    cwriter.write(encode(fr, data))
                rec["resp_bytes"] = cut
                await cwriter.drain()
                if kind == "stall_after_bytes":
                    rec["outcome"] = "stalled"
                    await self.hold(creader, fault)
                    return False
                if kind == "truncate":
                    rec["outcome"] = "truncated"
                    cwriter.close()
                    return False
                rec["outcome"] = "reset"
                raise Reset()
            cwriter.write(encode(fr, data))
            pos += len(data)
            rec["resp_bytes"] = pos
            await cwriter.drain()
        if cut is not None and kind != "stall_after_bytes":  # body shorter than the cut: whole
            rec["outcome"] = "reset" if kind == "reset_after_bytes" else "truncated"
            if kind == "reset_after_bytes":
                raise Reset()
        if fr[0] == "chunked":
            cwriter.write(b"0\r\n\r\n")
        await cwriter.drain()
        return keep


async def amain(args, log):
    proxy = Proxy(args, log)
    server = await asyncio.start_server(proxy.client, "127.0.0.1", args.port)
    proxy.addr = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
    other = await asyncio.start_server(lambda r, w: proxy.client(r, w, "elsewhere"), "127.0.0.1", 0)
    proxy.elsewhere = "127.0.0.1:%d" % other.sockets[0].getsockname()[1]
    stop, loop = asyncio.Event(), asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    _common.start_watchdog(args.lifetime, lambda: loop.call_soon_threadsafe(stop.set), log)
    log.info("proxying %s -> %s, plan %s", proxy.addr, args.upstream, args.plan)
    _common.ready({"addr": proxy.addr, "elsewhere": proxy.elsewhere, "upstream": args.upstream})
    await stop.wait()
    server.close()
    other.close()
    log.info("stopped")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--upstream", required=True, help="127.0.0.1:PORT")
    p.add_argument("--plan", required=True, help="JSON rule list, re-read on every request")
    p.add_argument("--log", help="JSON-lines request log")
    p.add_argument("--user", help="Basic credentials the proxy's own listener wants (with --password)")
    p.add_argument("--password", help="see --user")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--lifetime", type=float, default=1800, help="exit after this many seconds")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    log = _common.setup_logging("fault_proxy", args.verbose)
    _common.die_with_parent()
    asyncio.run(amain(args, log))
    sys.exit(0)


if __name__ == "__main__":
    main()
