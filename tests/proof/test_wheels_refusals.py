"""What a `wheels` patch must refuse (issue 18): a wheel whose bytes are not the lock's sha256,
no wheel for the platform, a wheel for another Python, an unmet `Requires-Dist`, a lock that is
not valid PEP 751. Each run ends with one line naming the problem, exits as refusals and errors
do today (docs/pipeline.md: 1 for an image `refused`, 2 for an error such as a bad patch folder,
which stops the run before any request), and pushes nothing: the registry's storage holds the
same files and skopeo reads the same digest as before.
"""
from __future__ import annotations

import pytest

from imagekit.wheel import sha256_file
from tests.proof import pylock, wheelrun, wheelset
from tests.proof.wheelimg import SITE

REPO = "proof/wheels-refuse"


@pytest.fixture(scope="module")
def image(wheels_world):
    return wheels_world.layers.push(wheels_world.addr, REPO, wheelrun.TAG)["digest"]


def problem_lines(run: wheelrun.Run) -> list[str]:
    """The lines a user reads: stderr's, and the `reason` of the image and each platform (and
    patch) of the JSON record."""
    lines = run.stderr.splitlines()
    doc = run.doc or {}
    for img in doc.get("images", []):
        lines.append(str(img.get("reason", "")))
        for p in img.get("platforms", []):
            lines.append(str(p.get("reason", "")))
            lines += [str(q.get("reason", "")) for q in p.get("patches", [])]
    return [line for line in lines if line]


def refused(world, image, tmp, folder, codes, *words) -> wheelrun.Run:
    """Apply FOLDER: exit in CODES, one line holding each of WORDS (a word is a string, or a
    tuple of which any one will do), nothing pushed."""
    before = wheelrun.storage(world.registry_dir)
    run = wheelrun.apply(world.addr, REPO, folder, tmp / "map.json", expect=None)
    assert run.code in codes, f"expected exit {' or '.join(map(str, codes))}: {run.describe()}"
    if run.code == 1:
        assert run.record["outcome"] == "refused", run.describe()
    wants = [w if isinstance(w, tuple) else (w,) for w in words]
    hits = [line for line in problem_lines(run)
            if all(any(alt.lower() in line.lower() for alt in want) for want in wants)]
    assert hits, f"no line names {words}: {run.describe()}"
    assert wheelrun.storage(world.registry_dir) == before, "a refused run pushed something"
    assert wheelrun.served(world.addr, REPO) == image, "the tag moved"
    return run


def test_wheel_hash_mismatch_by_path(wheels_world, image, tmp_path):
    folder = pylock.folder(tmp_path / "p", "hash-path", [wheelset.demo_pkg_2()])
    lock = (folder / "pylock.toml").read_text()
    digest = sha256_file(folder / "wheels" / wheelset.demo_pkg_2().filename)
    assert digest in lock
    (folder / "pylock.toml").write_text(lock.replace(digest, "0" * 64))
    refused(wheels_world, image, tmp_path, folder, (1, 2), "demo_pkg-2.0-py3-none-any.whl", ("sha256", "hash"))


def test_wheel_hash_mismatch_by_url(wheels_world, image, tmp_path):
    """The server answers other bytes than the lock's: the download is checked before use."""
    folder = pylock.folder(tmp_path / "u", "hash-url", [wheelset.fresh_pkg()], base_url=wheels_world.url,
                           served=wheels_world.served, target="/" + SITE)
    served = wheels_world.served / wheelset.fresh_pkg().filename
    other = tmp_path / "other"
    wheelset.fresh_pkg().write(other)
    body = served.read_bytes()
    # The last byte flipped (a zip ends in zeros: writing a zero would change nothing).
    served.write_bytes(body[:-1] + bytes([body[-1] ^ 0xFF]))
    assert served.read_bytes() != (other / served.name).read_bytes()
    try:
        refused(wheels_world, image, tmp_path, folder, (1, 2), "fresh_pkg-0.1-py3-none-any.whl", ("sha256", "hash"))
    finally:
        served.write_bytes((other / served.name).read_bytes())


def test_no_wheel_for_the_platform(wheels_world, image, tmp_path):
    """Only an aarch64 wheel for an amd64 image: never a wrong-architecture install."""
    folder = pylock.folder(tmp_path / "a", "arm-only", [wheelset.fastext("arm64")], target="/" + SITE)
    refused(wheels_world, image, tmp_path, folder, (1,), "fastext", ("x86_64", "amd64"))


def test_wheel_for_another_python(wheels_world, image, tmp_path):
    """A cp312 wheel for the image's Python 3.11."""
    folder = pylock.folder(tmp_path / "py", "py312", [wheelset.fastext("amd64", "cp312")],
                           target="/" + SITE)
    refused(wheels_world, image, tmp_path, folder, (1,), "fastext", ("cp311", "3.11", "cp312"))


def test_lock_for_another_python(wheels_world, image, tmp_path):
    """The lock's `requires-python` (>=3.12) excludes the image's Python 3.11."""
    folder = pylock.folder(tmp_path / "rp", "lock-py312", [wheelset.old_only("1.5")], requires_python=">=3.12")
    refused(wheels_world, image, tmp_path, folder, (1,), ("requires-python", ">=3.12"), ("3.11", ">=3.12"))


def test_unmet_requires_dist(wheels_world, image, tmp_path):
    folder = pylock.folder(tmp_path / "r", "needs-missing", [wheelset.needs_missing()], target="/" + SITE)
    refused(wheels_world, image, tmp_path, folder, (1,), "absent-lib")


# --- wheels that are hostile input: refused with one line, before anything is pushed ---------

HOSTILE = {
    "climbing": (wheelset.climbing, ("climbed.conf",)),
    "absolute": (wheelset.absolute, ("absolute.conf",)),
    "twice": (wheelset.twice, ("twice/__init__.py", ("twice", "duplicate", "more than once"))),
    "bad-record": (wheelset.bad_record, ("bad_record/__init__.py", "RECORD")),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_wheel(wheels_world, image, tmp_path, case):
    make, words = HOSTILE[case]
    folder = pylock.folder(tmp_path / case, f"hostile-{case}", [make()], target="/" + SITE)
    refused(wheels_world, image, tmp_path, folder, (1, 2), *words)


# --- locks that are not valid PEP 751: a bad patch folder, an error before any request -------

def broken_lock(tmp, pid: str, edit):
    folder = pylock.folder(tmp / pid, pid, [wheelset.demo_pkg_2()])
    lock = folder / "pylock.toml"
    lock.write_text(edit(lock.read_text()))
    return folder


BROKEN = {
    "bad-toml": (lambda t: t.replace("[[packages]]", "[[packages]", 1), ("pylock.toml",)),
    "no-lock-version": (lambda t: t.replace('lock-version = "1.0"\n', ""), ("pylock.toml", "lock-version")),
    "lock-version-2": (lambda t: t.replace('lock-version = "1.0"', 'lock-version = "2.0"'),
                       ("pylock.toml", "lock-version")),
    "no-hashes": (lambda t: "\n".join(line for line in t.splitlines() if not line.startswith("hashes")) + "\n",
                  ("pylock.toml", "demo", ("hash",))),
    "sdist-only": (lambda t: t.split("[[packages.wheels]]")[0]
                   + '[packages.sdist]\nname = "demo_pkg-2.0.tar.gz"\npath = "demo_pkg-2.0.tar.gz"\n'
                   + 'hashes = {sha256 = "' + "1" * 64 + '"}\n', ("pylock.toml", "demo", ("sdist", "wheel"))),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_lock_that_is_not_pep751(wheels_world, image, tmp_path, case):
    edit, words = BROKEN[case]
    folder = broken_lock(tmp_path, case, edit)
    run = refused(wheels_world, image, tmp_path, folder, (2,), *words)
    assert run.doc is None or not run.doc.get("images"), "a bad lock stops the run before any image"
