"""Shared helpers for the proof tests: the binary under test, and the observe block's anatomy."""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

ASSERT_LINE = "assert connector_id in self._prom_metrics, ("
MSG_LINE_1 = 'f"{connector_id} is not contained in the list of registered connectors "'
MSG_LINE_2 = 'f"with Prometheus metrics support: {self._prom_metrics.keys()}"'
CALL_RE = re.compile(r"^self\._prom_metrics\[connector_id\]\.observe\((?P<arg>.+), engine_idx\)$")
ANY_OBSERVE_CALL_RE = re.compile(r"\.observe\((?P<arg>.+), engine_idx\)")

# The argument the original call passes to the child's observe(), per release range.
ARG_DATA = 'stats_data["data"]'   # 0.11.1 - 0.29.0
ARG_PLAIN = "stats_data"          # 0.30.0 - 0.32.0


def binary() -> Path:
    path = Path(os.environ.get("RUNNER_PATCH_BIN", "target/release/runner-patch"))
    return path if path.is_absolute() else REPO_ROOT / path


@dataclass
class PatchRun:
    returncode: int
    report: dict | None
    stdout: str
    stderr: str
    output: bytes | None  # bytes written to --output, None when the file was not created

    def describe(self) -> str:
        return f"exit {self.returncode}, stdout={self.stdout!r}, stderr={self.stderr[-2000:]!r}"


def run_patch_file(src: Path, out: Path | None = None) -> PatchRun:
    """Run `runner-patch patch-file SRC [--output OUT] --json`; OUT must not exist beforehand."""
    cmd = [str(binary()), "patch-file", str(src), "--json"]
    if out is not None:
        assert not out.exists(), out
        cmd += ["--output", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = None
    output = out.read_bytes() if out is not None and out.exists() else None
    return PatchRun(proc.returncode, report, proc.stdout, proc.stderr, output)


@dataclass
class Block:
    """The buggy assert + call inside MultiKVConnectorPromMetrics.observe (0-based line indices)."""
    start: int   # the assert line
    end: int     # one past the call line
    indent: str  # the assert line's leading whitespace
    arg: str     # the argument form passed to the child's observe()


def find_blocks(lines: list[str]) -> list[Block]:
    """Every complete assert(3 lines)+')'+call block; lines without their line endings."""
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != ASSERT_LINE:
            continue
        seg = [s.strip() for s in lines[i:i + 5]]
        if len(seg) < 5 or seg[1:4] != [MSG_LINE_1, MSG_LINE_2, ")"]:
            continue
        m = CALL_RE.match(seg[4])
        if m:
            indent = line[: len(line) - len(line.lstrip())]
            blocks.append(Block(i, i + 5, indent, m.group("arg")))
    return blocks


def split_lines(text: str) -> list[str]:
    return text.split("\n")


def reference_patch(text: str) -> str:
    """A hand-written patch of the one block (the upstream 0.33.0 form), for harness self-tests.

    Works on LF text only; this is NOT the binary's algorithm, only a known-good comparison.
    """
    lines = split_lines(text)
    (block,) = find_blocks(lines)
    ind, step = block.indent, ("\t" if block.indent.startswith("\t") else "    ")
    new = [
        f"{ind}prom_metrics = self._prom_metrics.get(connector_id)",
        f"{ind}if prom_metrics is not None:",
        f"{ind}{step}prom_metrics.observe({block.arg}, engine_idx)",
    ]
    return "\n".join(lines[: block.start] + new + lines[block.end:])
