"""The test wheels of the wheels proof, written here with `imagekit.wheel`: what the fixture
images have installed (by pip, in a chroot) and what the patches lock. Each package prints or
returns its own name and version, so a launcher or an import shows which version the container
sees.

Installed in the fixture images: demo-pkg 1.0 (console script `demo`, a module 2.0 drops),
base-lib 1.0 (demo-pkg needs it), old-only 2.0 (a subpackage and a console script 1.5 does not
have), dep-user 1.0 (needs old-only>=2.0: a downgrade breaks it, as `pip check` says),
nsshare-a 1.0 and nsshare-b 1.0 (one namespace package directory, `nsshare/`, shared).
"""
from __future__ import annotations

import warnings
from pathlib import Path

from imagekit.wheel import Wheel, record_hash

INSTALLED = [("demo-pkg", "1.0"), ("base-lib", "1.0"), ("old-only", "2.0"), ("dep-user", "1.0"),
             ("nsshare-a", "1.0"), ("nsshare-b", "1.0")]
ARCH_TAG = {"amd64": "x86_64", "arm64": "aarch64"}


def _cli(name: str, version: str, extra: str = "") -> str:
    return (f"import sys\n\n\ndef main():\n    print({f'{name} {version}'!r}{extra})\n    return 0\n\n\n"
            f"def admin():\n    print({f'{name} {version} admin'!r})\n    return 0\n")


def base_lib(version: str = "1.0") -> Wheel:
    return Wheel("base-lib", version, files={
        "base_lib/__init__.py": f'VERSION = "{version}"\n\n\ndef greet():\n    return "base-lib {version}"\n'})


def demo_pkg_1() -> Wheel:
    return Wheel("demo-pkg", "1.0", requires=["base-lib>=1.0"], console_scripts={"demo": "demo_pkg.cli:main"},
                 files={"demo_pkg/__init__.py": 'VERSION = "1.0"\n',
                        "demo_pkg/cli.py": _cli("demo-pkg", "1.0"),
                        "demo_pkg/legacy.py": "# only in 1.0: an upgrade removes it\nOLD = True\n"})


def demo_pkg_2() -> Wheel:
    """The upgrade: two console scripts and a gui script, a `.data` directory of every kind, a
    requirement whose marker excludes this platform."""
    return Wheel(
        "demo-pkg", "2.0",
        requires=["base-lib>=1.0", 'pywin-helper>=1; sys_platform == "win32"'],
        console_scripts={"demo": "demo_pkg.cli:main", "demo-admin": "demo_pkg.cli:admin"},
        gui_scripts={"demo-gui": "demo_pkg.cli:admin"},
        files={"demo_pkg/__init__.py": 'VERSION = "2.0"\n',
               "demo_pkg/cli.py": _cli("demo-pkg", "2.0", ', "with base-lib", __import__("base_lib").VERSION'),
               "demo_pkg/util/__init__.py": "",
               "demo_pkg/util/fmt.py": "def fmt(x):\n    return f'<{x}>'\n"},
        data={"scripts": {"demo-tool": ("#!python\nimport demo_pkg\nprint('demo-tool', demo_pkg.VERSION)\n", 0o755)},
              "purelib": {"demo_pkg_plugins/__init__.py": 'PLUGINS = ["fmt"]\n'},
              "data": {"share/demo-pkg/demo.conf": "level = 2\n"},
              "headers": {"demo.h": "#define DEMO_PKG_VERSION 2\n"}})


def old_only(version: str) -> Wheel:
    files = {"old_only/__init__.py": f'VERSION = "{version}"\n',
             "old_only/a.py": f"A = {version!r}\n"}
    scripts = {}
    if version == "2.0":
        files.update({"old_only/b.py": "B = 2\n", "old_only/extra/__init__.py": "",
                      "old_only/extra/deep.py": "DEEP = True\n", "old_only/cli.py": _cli("old-only", version)})
        scripts = {"old-only-tool": "old_only.cli:main"}
    return Wheel("old-only", version, files=files, console_scripts=scripts)


def dep_user() -> Wheel:
    return Wheel("dep-user", "1.0", requires=["old-only>=2.0"], files={"dep_user/__init__.py": "import old_only\n"})


def nsshare(part: str) -> Wheel:
    return Wheel(f"nsshare-{part}", "1.0", files={f"nsshare/{part}/__init__.py": f'PART = "{part}"\n'})


def fresh_pkg() -> Wheel:
    """A new package: it needs demo-pkg, which the image has."""
    return Wheel("fresh-pkg", "0.1", requires=["demo-pkg>=1.0"], console_scripts={"fresh": "fresh_pkg:main"},
                 files={"fresh_pkg/__init__.py": _cli("fresh-pkg", "0.1")})


def fastext(arch: str, python: str = "cp311") -> Wheel:
    """A binary wheel: the same Python code on every architecture, and a stand-in for the
    extension module whose name and bytes are the architecture's."""
    triple = ARCH_TAG[arch]
    return Wheel("fastext", "1.0", tag=f"{python}-{python}-manylinux_2_17_{triple}",
                 files={"fastext/__init__.py": ('import importlib.resources\n\n'
                                                'ARCH = importlib.resources.files(__name__).joinpath("ARCH").read_text()\n'),
                        "fastext/ARCH": triple,
                        f"fastext/_native.cpython-{python[2:]}-{triple}-linux-gnu.so":
                            f"\x7fELF stand-in for the {triple} extension of fastext 1.0\n".encode() * 8})


def pywin_helper() -> Wheel:
    """Locked with a `sys_platform == "win32"` marker, and only a Windows wheel: never installed
    on a Linux image, and no refusal for the missing Linux wheel."""
    return Wheel("pywin-helper", "1.0", tag="py3-none-win_amd64", files={"pywin_helper/__init__.py": ""})


def needs_missing() -> Wheel:
    return Wheel("needs-missing", "1.0", requires=["absent-lib>=1.0"], files={"needs_missing/__init__.py": ""})


class Broken(Wheel):
    """A wheel whose entries EDIT changes after they are made (RECORD included), for the
    refusals of hostile input."""

    def __init__(self, *args, edit, **kw):
        super().__init__(*args, **kw)
        self.edit = edit

    def entries(self):
        return self.edit(super().entries())

    def bytes(self, entries=None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile's "Duplicate name", meant here
            return super().bytes(entries)


def _same(entries):
    return entries


def climbing() -> Wheel:
    """An entry whose `..` climbs out of the site directory (RECORD agrees with it)."""
    return Broken("climber", "1.0", edit=_same, files={"climber/__init__.py": "",
                                                       "../../../../../etc/climbed.conf": "owned\n"})


def absolute() -> Wheel:
    return Broken("absolute-name", "1.0", edit=_same, files={"absolute_name/__init__.py": "",
                                                            "/etc/absolute.conf": "owned\n"})


def twice() -> Wheel:
    """One name given twice in the archive, with other bytes the second time."""
    def edit(entries):
        first = [e for e in entries if e[0] == "twice/__init__.py"][0]
        return entries[:-1] + [(first[0], b"SECOND = True\n", first[2]), entries[-1]]
    return Broken("twice", "1.0", edit=edit, files={"twice/__init__.py": "FIRST = True\n"})


def bad_record() -> Wheel:
    """RECORD gives a module a hash that is not its bytes'."""
    good, other = b"X = 1\n", b"X = 2\n"

    def edit(entries):
        return [(p, d.replace(record_hash(good).encode(), record_hash(other).encode()) if p.endswith("/RECORD") else d, m)
                for p, d, m in entries]
    return Broken("bad-record", "1.0", edit=edit, files={"bad_record/__init__.py": good})


def installed_wheels() -> list[Wheel]:
    return [demo_pkg_1(), base_lib(), old_only("2.0"), dep_user(), nsshare("a"), nsshare("b")]


def write(wheels: list[Wheel], directory: Path) -> dict[str, Path]:
    """Writes WHEELS into DIRECTORY; {file name: path}."""
    return {w.filename: w.write(directory) for w in wheels}
