"""pip as the judge of a `wheels` patch: the tree pip makes of the original image and the tree
runner-patch made must be the same (`compare`), and inside the patched tree pip itself must see
the locked versions, find the problems the tool reported (`pip check`), import each package and
run each launcher (`inside`).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.proof import pyroot
from tests.proof.wheelimg import (BIN, check_record, entry_points, launcher_imports, record_rows,
                                  resolve, snapshot)

SHOWN = 25  # differences listed in a failure


def _shebang(data: bytes) -> tuple[str | None, bytes]:
    """(interpreter path of a `#!` first line, the rest of the bytes)."""
    if not data.startswith(b"#!"):
        return None, data
    first, _, rest = data.partition(b"\n")
    return first[2:].decode(errors="replace").strip().split()[0], rest


def _same_interpreter(pip_root: Path, tool_root: Path, a: bytes, b: bytes) -> str | None:
    """None when A (pip's) and B (the tool's) start with `#!` lines naming interpreters that are
    the same file in their roots; else what differs."""
    ia, _ = _shebang(a)
    ib, _ = _shebang(b)
    if ia is None or ib is None:
        return f"not both `#!` scripts ({ia!r}, {ib!r})"
    ra, rb = resolve(pip_root, ia), resolve(tool_root, ib)
    if ra != rb or not (tool_root / rb.lstrip("/")).is_file():
        return f"interpreter {ib} ({rb}) is not pip's {ia} ({ra})"
    return None


def _free_difference(pip_root: Path, tool_root: Path, rel: str, launchers: dict[str, str],
                     judge: str = "pip") -> str | None:
    """None when the two versions of file REL may differ (the judge's install contract leaves it
    free); else a description of the difference."""
    a, b = (pip_root / rel).read_bytes(), (tool_root / rel).read_bytes()
    if rel.endswith(".dist-info/INSTALLER"):
        if a != INSTALLER[judge] or not b.strip():
            return f"INSTALLER is {b!r} ({judge} wrote {a!r})"
        return None
    if rel.endswith(".dist-info/direct_url.json"):
        # PEP 610 leaves archive_info's hashes optional (uv writes none, pip and the tool the
        # wheel's sha256); the URL must be the same, and a hash given must be the file's.
        da, db = json.loads(a), json.loads(b)
        if da.get("url") != db.get("url") or "archive_info" not in da or "archive_info" not in db:
            return f"direct_url.json is {b!r} ({judge} wrote {a!r})"
        ha, hb = da["archive_info"].get("hashes", {}), db["archive_info"].get("hashes", {})
        if any(ha[k] != hb[k] for k in set(ha) & set(hb)):
            return f"direct_url.json hashes {hb} ({judge}: {ha})"
        return None
    if rel in launchers:
        why = _same_interpreter(pip_root, tool_root, a, b)
        if why:
            return f"launcher: {why}"
        if not launcher_imports(b.decode(errors="replace"), launchers[rel]):
            return f"launcher does not call the entry point {launchers[rel]}: {b[:300]!r}"
        return None
    if rel.startswith(BIN + "/"):
        why = _same_interpreter(pip_root, tool_root, a, b)
        if why:
            return f"script bytes differ and {why}"
        if _shebang(a)[1] != _shebang(b)[1]:
            return "script bytes differ after the `#!` line"
        return None
    return "bytes differ"


# Files of a `.dist-info` that one installer writes and another need not: uv writes REQUESTED
# for what was asked for and a record of its cache; pip's REQUESTED is asked for by the tool.
OPTIONAL = {"pip": (), "uv": ("REQUESTED", "uv_cache.json")}
INSTALLER = {"pip": b"pip\n", "uv": b"uv"}  # each one's INSTALLER, byte for byte


def _optional(path: str, judge: str) -> bool:
    parent, _, name = path.rpartition("/")
    return parent.endswith(".dist-info") and name in OPTIONAL[judge]


def compare(pip_root: Path, tool_root: Path, judge: str = "pip") -> list[str]:
    """The differences between the tree the JUDGE (pip or uv) made (PIP_ROOT) and the tool's
    (TOOL_ROOT): paths only in one, type, mode, owner, link target, bytes; RECORDs compared as
    sets of rows (hashes of the files free to differ left out, the optional files' rows
    dropped) and checked against each tree's files."""
    a, b = snapshot(pip_root), snapshot(tool_root)
    diffs = [f"only in {judge}'s tree: /{p}" for p in sorted(set(a) - set(b)) if not _optional(p, judge)]
    diffs += [f"only in runner-patch's tree: /{p}" for p in sorted(set(b) - set(a)) if not _optional(p, judge)]
    launchers = entry_points(pip_root)
    free, records = set(), []
    for p in sorted(set(a) & set(b)):
        x, y = a[p], b[p]
        if p.endswith(".dist-info/RECORD") and x[0] == y[0] == "file":
            records.append(p)
            if (x[1], x[4:]) != (y[1], y[4:]):
                diffs.append(f"/{p}: mode/owner {oct(y[1])} {y[4:]} ({judge}: {oct(x[1])} {x[4:]})")
            continue
        if x == y or _optional(p, judge):
            continue
        if x[0] != y[0] or x[0] != "file":
            diffs.append(f"/{p}: {y} ({judge}: {x})")
            continue
        if (x[1], x[4:]) != (y[1], y[4:]):
            diffs.append(f"/{p}: mode/owner {oct(y[1])} {y[4:]} ({judge}: {oct(x[1])} {x[4:]})")
        if x[2] != y[2]:
            why = _free_difference(pip_root, tool_root, p, launchers, judge)
            if why:
                diffs.append(f"/{p}: {why}")
            else:
                free.add(p)
    for rec in records:
        site = os.path.dirname(os.path.dirname(rec))
        dist = os.path.dirname(rec).split("/")[-1]
        free_rel = {os.path.relpath(p, site) for p in free} | {dist + "/INSTALLER"}
        drop = {f"{dist}/{name}" for name in OPTIONAL[judge]}
        ra = {r for r in record_rows((pip_root / rec).read_bytes(), free_rel) if r[0] not in drop}
        rb = {r for r in record_rows((tool_root / rec).read_bytes(), free_rel) if r[0] not in drop}
        diffs += [f"/{rec}: row only in {judge}'s: {r}" for r in sorted(ra - rb)]
        diffs += [f"/{rec}: row only in runner-patch's: {r}" for r in sorted(rb - ra)]
        if a[rec] != b[rec]:  # a RECORD pip wrote (or left) the same is pip's own business
            diffs += check_record(tool_root, rec)
    return diffs


def assert_same_tree(pip_root: Path, tool_root: Path, what: str, judge: str = "pip") -> None:
    diffs = compare(pip_root, tool_root, judge)
    assert not diffs, (f"{what}: runner-patch's tree differs from {judge}'s in {len(diffs)} ways:\n  "
                       + "\n  ".join(diffs[:SHOWN]))


# --- inside the patched tree -----------------------------------------------------------------

def pip_list(root: Path) -> dict[str, str]:
    out = pyroot.pip(root, "list", "--format", "json").stdout
    return {re.sub(r"[-_.]+", "-", d["name"]).lower(): d["version"] for d in json.loads(out)}


def pip_check(root: Path) -> list[str]:
    """The problems `pip check` reports (its lines), none when it exits 0."""
    r = pyroot.pip(root, "check", check=False)
    if r.returncode == 0:
        return []
    return [line for line in r.stdout.splitlines() if line.strip()]


def tool_warnings(platform_record: dict) -> list[str]:
    """The `warnings` of a platform in the digest map (the record's own and its patches'), each
    as text (none when the record has no `warnings` field)."""
    # The map writes `warnings` only when there are some (older maps stay byte for byte), so a
    # record without the field has none; a `warnings` that is not a list is a defect.
    lists = [platform_record.get("warnings", [])]
    lists += [p["warnings"] for p in platform_record.get("patches", []) if "warnings" in p]
    assert all(isinstance(w, list) for w in lists), f"`warnings` is not a list: {platform_record}"
    return [w if isinstance(w, str) else json.dumps(w) for ws in lists for w in ws]


def assert_check_agrees(root: Path, platform_record: dict) -> list[str]:
    """`pip check` in ROOT and the tool's warnings name the same problems: as many, and each pip
    line's distribution and required project named by one warning."""
    problems, warnings = pip_check(root), tool_warnings(platform_record)
    assert len(problems) == len(warnings), f"pip check says {problems}, runner-patch warned {warnings}"
    for line in problems:
        m = re.match(r"(\S+) \S+ (?:has requirement|requires) ([A-Za-z0-9._-]+)", line)
        assert m, f"unexpected pip check line {line!r}"
        dist, req = (re.sub(r"[-_.]+", "-", s).lower() for s in m.groups())
        hits = [w for w in warnings if dist in re.sub(r"[-_.]+", "-", w.lower()) and req in re.sub(r"[-_.]+", "-", w.lower())]
        assert hits, f"pip check says {line!r}; no warning of runner-patch names {dist} and {req}: {warnings}"
    return problems


def run_launcher(root: Path, rel: str) -> subprocess.CompletedProcess:
    return pyroot.chroot(root, "/" + rel, check=False)


def inside(pip_root: Path, tool_root: Path, versions: dict[str, str], imports: list[str],
           platform_record: dict, gone: tuple[str, ...] = ()) -> None:
    """In the patched tree: pip lists the locked VERSIONS and not the GONE distributions, pip
    check agrees with the tool's warnings, each module of IMPORTS imports (as in pip's tree),
    each launcher runs and prints what pip's launcher prints."""
    listed = pip_list(tool_root)
    for name, version in versions.items():
        assert listed.get(name) == version, f"pip list shows {name} {listed.get(name)}, locked {version}"
    for name in gone:
        assert name not in listed, f"pip list still shows {name} {listed[name]}"
    assert pip_list(pip_root) == listed, "pip list differs between pip's tree and runner-patch's"
    assert_check_agrees(tool_root, platform_record)
    for mod in imports:
        code = f"import {mod}; print({mod}.__name__, getattr({mod}, 'VERSION', ''))"
        r = pyroot.chroot(tool_root, pyroot.PYTHON, "-c", code, check=False)
        assert r.returncode == 0, f"import {mod} in the patched image: {r.stderr}"
        assert r.stdout == pyroot.chroot(pip_root, pyroot.PYTHON, "-c", code).stdout
    for rel in sorted(entry_points(pip_root)):
        mine, pips = run_launcher(tool_root, rel), run_launcher(pip_root, rel)
        assert pips.returncode == 0 and pips.stdout.strip(), f"pip's /{rel}: {pips}"
        assert (mine.returncode, mine.stdout) == (pips.returncode, pips.stdout), \
            f"/{rel} in the patched image: exit {mine.returncode} {mine.stdout!r} {mine.stderr[-500:]!r}; pip's: {pips.stdout!r}"
