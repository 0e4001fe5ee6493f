"""Shared helpers for the test-support daemons (token_server, fault_proxy).

Every daemon: logs to stderr, prints exactly one JSON ready-line on stdout,
never reads stdin, exits on SIGTERM/SIGINT, when its parent dies (Linux
PR_SET_PDEATHSIG plus a parent-pid watch) and after --lifetime seconds.
"""

import ctypes
import json
import logging
import os
import signal
import sys
import threading
import time


def setup_logging(name, verbose=False):
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbose else logging.INFO,
        format=f"%(asctime)s {name} %(levelname)s %(message)s",
    )
    return logging.getLogger(name)


def ready(obj):
    """Print the one JSON ready-line on stdout and close stdout."""
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def die_with_parent():
    """Ask the kernel for SIGTERM when the parent exits (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start_watchdog(lifetime, on_exit, log):
    """Call on_exit() after `lifetime` seconds or when the parent pid changes."""
    parent = os.getppid()
    deadline = time.monotonic() + lifetime

    def watch():
        while True:
            time.sleep(0.5)
            if time.monotonic() > deadline:
                log.info("lifetime of %ss reached, exiting", lifetime)
                break
            if os.getppid() != parent:
                log.info("parent %s gone, exiting", parent)
                break
        on_exit()

    threading.Thread(target=watch, daemon=True).start()


def write_jsonl(lock, fh, obj):
    line = json.dumps(obj, sort_keys=True) + "\n"
    with lock:
        fh.write(line)
        fh.flush()
