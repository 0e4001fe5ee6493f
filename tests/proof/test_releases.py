"""`runner-patch patch-file` against the real multi_connector.py of every vLLM release, and hand-made
variants of it.

What a correct patch looks like here (`check_patched`): the only lines removed are the assert (4 lines)
and the call after it; the added lines take their place, at the block's indentation, hold no assert, and
call the child's observe() with the original's argument form; the file compiles; line endings and a BOM
are kept.
"""
from __future__ import annotations

import difflib
import py_compile
from pathlib import Path

import pytest

from tests.proof import proofutil as pu
from tests.proof import releases

NOT_AFFECTED = {"0.10.2", "0.11.0", "0.33.0"}
AFFECTED = [v for v in releases.VERSIONS if v not in NOT_AFFECTED]
BOM = b"\xef\xbb\xbf"


def expected_arg(version: str) -> str:
    return pu.ARG_DATA if releases.version_key(version) <= (0, 29, 0) else pu.ARG_PLAIN


def original(version: str) -> bytes:
    path = releases.multi_connector_path(version)
    assert path.is_file(), f"{path} missing from the cache"
    return path.read_bytes()


def assert_compiles(path: Path) -> None:
    py_compile.compile(str(path), cfile=str(path) + ".pyc", doraise=True)


def check_patched(orig: bytes, patched: bytes, arg: str) -> None:
    """Raise AssertionError unless `patched` is `orig` with exactly the observe block replaced."""
    assert orig.startswith(BOM) == patched.startswith(BOM), "BOM not kept"
    crlf = b"\r\n" in orig
    if crlf:
        assert orig.count(b"\n") == orig.count(b"\r\n"), "check_patched needs consistent endings"
        assert patched.count(b"\n") == patched.count(b"\r\n"), "CRLF endings not kept everywhere"
    else:
        assert b"\r" not in patched, "CR introduced into an LF file"
    a = pu.split_lines(orig.decode("utf-8-sig").replace("\r\n", "\n"))
    b = pu.split_lines(patched.decode("utf-8-sig").replace("\r\n", "\n"))

    (block,) = pu.find_blocks(a)
    assert block.arg == arg, f"original passes {block.arg}, expected {arg}"
    ops = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
           if op[0] != "equal"]
    assert ops, "nothing changed"
    removed = [line for _, i1, i2, _, _ in ops for line in a[i1:i2]]
    added = [line for _, _, _, j1, j2 in ops for line in b[j1:j2]]
    assert all(block.start <= i1 and i2 <= block.end for _, i1, i2, _, _ in ops), (
        f"changes outside the observe block (lines {block.start + 1}-{block.end}): {ops}")
    assert removed == a[block.start:block.end], f"removed lines differ from the block: {removed}"
    assert added, "block removed but nothing added"
    assert not any("assert" in line for line in added), f"an assert survives: {added}"
    assert all(line.startswith(block.indent) for line in added if line.strip()), (
        f"added lines not at the block's indentation {block.indent!r}: {added}")
    calls = [m.group("arg") for line in added for m in pu.ANY_OBSERVE_CALL_RE.finditer(line)]
    assert calls == [arg], f"child observe() call(s) {calls}, expected one passing {arg}"
    assert pu.find_blocks(b) == [], "the buggy block is still in the output"


# ---------------------------------------------------------------- harness self-tests (no binary)

@pytest.mark.parametrize("version", releases.VERSIONS)
def test_release_file_shape(release_cache, version):
    """The facts the other tests rest on: which releases carry the block, and its argument form."""
    text = original(version).decode("utf-8")
    blocks = pu.find_blocks(pu.split_lines(text))
    if version in NOT_AFFECTED:
        assert blocks == []
        if version == "0.33.0":
            assert "prom_metrics = self._prom_metrics.get(connector_id)" in text
        else:
            assert "MultiKVConnectorPromMetrics" not in text
    else:
        assert [b.arg for b in blocks] == [expected_arg(version)]
        assert "\r" not in text and not text.startswith("\ufeff")


@pytest.mark.parametrize("version", AFFECTED)
def test_checker_accepts_reference_patch(release_cache, tmp_path, version):
    orig = original(version)
    patched = pu.reference_patch(orig.decode()).encode()
    check_patched(orig, patched, expected_arg(version))
    (tmp_path / "p.py").write_bytes(patched)
    assert_compiles(tmp_path / "p.py")


def test_checker_rejects_wrong_patches(release_cache):
    version = "0.29.0"
    orig = original(version)
    good = pu.reference_patch(orig.decode())
    wrong = {
        "arg changed": good.replace('observe(stats_data["data"], engine_idx)',
                                    "observe(stats_data, engine_idx)"),
        "other line touched": good.replace("import copy\n", "import copy  # x\n"),
        "assert kept": good.replace("if prom_metrics is not None:",
                                    "assert connector_id\n            if prom_metrics is not None:"),
        "unchanged": orig.decode(),
        "crlf lost": None,
    }
    for name, text in wrong.items():
        src, out = orig, (text or "").encode()
        if name == "crlf lost":
            src, out = orig.replace(b"\n", b"\r\n"), good.encode()
        with pytest.raises(AssertionError):
            check_patched(src, out, pu.ARG_DATA)
            pytest.fail(f"checker accepted: {name}")


# ---------------------------------------------------------------- the binary on the real releases

@pytest.mark.parametrize("version", releases.VERSIONS)
def test_patch_release(release_cache, patch_bin, tmp_path, version):
    src = releases.multi_connector_path(version)
    run = pu.run_patch_file(src, tmp_path / "out.py")
    assert run.report is not None, run.describe()
    assert run.report.get("patch"), run.describe()
    if version in NOT_AFFECTED:
        assert (run.returncode, run.report["outcome"]) == (0, "not-affected"), run.describe()
        assert run.output is None, "--output written for a not-affected file"
        return
    assert (run.returncode, run.report["outcome"]) == (0, "patched"), run.describe()
    assert isinstance(run.report.get("shape"), str) and run.report["shape"], run.describe()
    assert run.output is not None, "patched but --output not written"
    check_patched(src.read_bytes(), run.output, expected_arg(version))
    assert_compiles(tmp_path / "out.py")

    again = pu.run_patch_file(tmp_path / "out.py", tmp_path / "again.py")
    assert (again.returncode, (again.report or {}).get("outcome")) == (0, "already-patched"), (
        again.describe())
    assert again.output is None, "--output written for an already-patched file"


def test_one_patch_id_and_stable_shape_per_call_form(release_cache, patch_bin):
    """Same patch id everywhere; each call form is always reported under one shape name."""
    shapes: dict[str, set] = {pu.ARG_DATA: set(), pu.ARG_PLAIN: set()}
    patch_ids = set()
    for version in releases.VERSIONS:
        run = pu.run_patch_file(releases.multi_connector_path(version))
        assert run.report is not None, run.describe()
        patch_ids.add(run.report.get("patch"))
        if version in AFFECTED:
            shapes[expected_arg(version)].add(run.report.get("shape"))
    assert len(patch_ids) == 1, patch_ids
    assert all(len(s) == 1 for s in shapes.values()), shapes


# ---------------------------------------------------------------- hand-made variants

def _lf_patched(tmp_path: Path, version: str) -> bytes:
    run = pu.run_patch_file(releases.multi_connector_path(version), tmp_path / "lf-out.py")
    assert run.output is not None, run.describe()
    return run.output


def _to_tabs(text: str) -> str:
    out = []
    for line in text.split("\n"):
        stripped = line.lstrip(" ")
        n = len(line) - len(stripped)
        out.append("\t" * (n // 4) + " " * (n % 4) + stripped)
    return "\n".join(out)


def _extra_nesting(text: str) -> str:
    lines = pu.split_lines(text)
    (b,) = pu.find_blocks(lines)
    inner = [("    " + line) if line.strip() else line for line in lines[b.start:b.end]]
    return "\n".join(lines[:b.start] + [b.indent + "if True:"] + inner + lines[b.end:])


def _duplicated(text: str) -> str:
    lines = pu.split_lines(text)
    (b,) = pu.find_blocks(lines)
    loop = lines[b.start - 1:b.end]  # the `for` line and its block
    assert loop[0].lstrip().startswith("for connector_id, stats_data in")
    return "\n".join(lines[:b.end] + loop + lines[b.end:])


def _truncated(text: str, after: str) -> str:
    cut = text.index(after) + len(after)
    return text[:cut] + "\n"


@pytest.mark.parametrize("version", ["0.29.0", "0.30.0"])
@pytest.mark.parametrize("variant", ["crlf", "bom", "bom+crlf"])
def test_endings_and_bom_kept(release_cache, patch_bin, tmp_path, version, variant):
    orig = original(version)
    src_bytes = orig
    if "crlf" in variant:
        src_bytes = src_bytes.replace(b"\n", b"\r\n")
    if "bom" in variant:
        src_bytes = BOM + src_bytes
    src = tmp_path / "in.py"
    src.write_bytes(src_bytes)
    run = pu.run_patch_file(src, tmp_path / "out.py")
    assert (run.returncode, (run.report or {}).get("outcome")) == (0, "patched"), run.describe()
    check_patched(src_bytes, run.output, expected_arg(version))
    assert_compiles(tmp_path / "out.py")
    normalised = run.output.removeprefix(BOM).replace(b"\r\n", b"\n")
    assert normalised == _lf_patched(tmp_path, version), "differs from the LF file's patch"
    again = pu.run_patch_file(tmp_path / "out.py")
    assert (again.report or {}).get("outcome") == "already-patched", again.describe()


def test_other_indentation_level_patched(release_cache, patch_bin, tmp_path):
    text = _extra_nesting(original("0.29.0").decode())
    src = tmp_path / "in.py"
    src.write_text(text)
    assert_compiles(src)  # the variant itself is valid Python
    run = pu.run_patch_file(src, tmp_path / "out.py")
    assert (run.returncode, (run.report or {}).get("outcome")) == (0, "patched"), run.describe()
    check_patched(text.encode(), run.output, pu.ARG_DATA)
    assert_compiles(tmp_path / "out.py")
    again = pu.run_patch_file(tmp_path / "out.py")
    assert (again.report or {}).get("outcome") == "already-patched", again.describe()


REFUSED_VARIANTS = {
    "message-changed": lambda t: t.replace("is not contained in the list", "is not in the list"),
    "duplicated": _duplicated,
    "truncated-in-message": lambda t: _truncated(t, pu.MSG_LINE_1),
    "truncated-in-call": lambda t: _truncated(t, "self._prom_metrics[connector_id].observe("),
    "mixed-endings": lambda t: t.replace("\n", "\r\n", 1),
    # Upstream indents with spaces only; a tab-indented block is not a shape it ever had, and
    # the replacement's relative indentation would have to be guessed: refused by design.
    "tabs": _to_tabs,
}


@pytest.mark.parametrize("version", ["0.29.0", "0.30.0"])
@pytest.mark.parametrize("variant", sorted(REFUSED_VARIANTS))
def test_refused(release_cache, patch_bin, tmp_path, version, variant):
    text = original(version).decode()
    bad = REFUSED_VARIANTS[variant](text)
    assert bad != text
    src = tmp_path / "in.py"
    src.write_bytes(bad.encode())
    run = pu.run_patch_file(src, tmp_path / "out.py")
    assert (run.returncode, (run.report or {}).get("outcome")) == (1, "refused"), run.describe()
    assert run.report.get("reason"), run.describe()
    assert run.output is None, "--output written for a refused file"
