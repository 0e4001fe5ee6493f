"""A TCP proxy that limits every connection to a fixed rate, for the benchmark's throttled
link (issue 20): a CDN or a corporate proxy that gives each connection a share, and as many
connections as asked for.

    python3 -m bench.throttle --upstream 127.0.0.1:PORT --rate BYTES_PER_S [--port N]

Prints one JSON line when ready: {"addr": "127.0.0.1:P", "rate": R}. Each accepted connection
gets its own connection to the upstream; bytes are copied both ways in 64 KiB pieces, each
direction paced to at most R bytes per second (no burst beyond one piece, also after an idle
keep-alive pause). The proxy knows nothing of HTTP: what it limits is exactly one TCP connection.
Exits on SIGTERM/SIGINT or when its parent exits. Importable: start(upstream, rate) ->
(Popen, addr).
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

PIECE = 64 * 1024


def pump(src, dst, rate):
    """Copies src to dst, never faster than `rate` bytes per second (time spent idle earns no
    credit: no burst beyond one piece), then half-closes dst."""
    due = time.monotonic()
    buf = bytearray(PIECE)
    view = memoryview(buf)
    try:
        while True:
            n = src.recv_into(buf)
            if n == 0:
                break
            dst.sendall(view[:n])
            due = max(due, time.monotonic()) + n / rate
            ahead = due - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(conn, upstream, rate):
    host, port = upstream.rsplit(":", 1)
    try:
        up = socket.create_connection((host, int(port)), timeout=30)
    except OSError:
        conn.close()
        return
    up.settimeout(None)
    for s in (conn, up):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=pump, args=(up, conn, rate), daemon=True)
    back.start()
    pump(conn, up, rate)
    back.join()
    conn.close()
    up.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--upstream", required=True, help="127.0.0.1:PORT")
    p.add_argument("--rate", type=float, required=True, help="bytes per second, per connection and direction")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args(argv)
    try:  # SIGTERM when the parent (the benchmark) exits (Linux)
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    lsn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind(("127.0.0.1", a.port))
    lsn.listen(256)
    addr = "127.0.0.1:%d" % lsn.getsockname()[1]
    print(json.dumps({"addr": addr, "rate": a.rate}), flush=True)
    try:
        while True:
            conn, _ = lsn.accept()
            threading.Thread(target=serve, args=(conn, a.upstream, a.rate), daemon=True).start()
    except KeyboardInterrupt:
        return 0


def start(upstream, rate):
    """Starts the proxy in its own process; returns it and its address."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.throttle", "--upstream", upstream, "--rate", str(rate)],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    line = proc.stdout.readline()
    return proc, json.loads(line)["addr"]


if __name__ == "__main__":
    sys.exit(main())
