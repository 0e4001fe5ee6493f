#!/usr/bin/env python3
"""Checks the links of the repository's Markdown files (`make lint`): every relative link must
name a file or directory that exists, and every `#anchor` a heading of its target, with the
anchors GitHub derives from headings. Links to other sites are not fetched.

    python3 scripts/doclinks.py              # one `path:line: what` per broken link, exit 1 if any
    python3 scripts/doclinks.py --self-test

Python 3 standard library only.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
SKIP_DIRS = {".git", "target", "dist", ".demo", "node_modules", "__pycache__", ".pytest_cache"}


def markdown_files(root):
    """The Markdown files git tracks (or, outside a git checkout, every one under root)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "*.md"],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        files = [f for f in out if f and os.path.exists(os.path.join(root, f))]
        if files:
            return sorted(files)
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        found += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(".md")]
    return sorted(found)


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with inline code blanked."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif line.strip().startswith(fence):
                fence = None
            continue
        if fence is None and not line.startswith("    "):
            yield n, re.sub(r"`[^`]*`", lambda c: " " * len(c.group(0)), line)


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor of a Markdown file: its headings' slugs, numbered when repeated."""
    seen, out = {}, set()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    fence = None
    for line in text.split("\n"):
        m = re.match(r"\s*(```+|~~~+)", line)
        if m:
            fence = None if fence else m.group(1)[0]
            continue
        h = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fence is None and h:
            s = slug(h.group(1))
            n = seen.get(s, 0)
            out.add(s if n == 0 else f"{s}-{n}")
            seen[s] = n + 1
    out.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return out


def check(root):
    problems = []
    cache = {}
    for rel in markdown_files(root):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
        for n, line in prose_lines(text):
            for m in LINK.finditer(line):
                target = m.group(1)
                if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):
                    continue  # another site, mailto:, ...
                file_part, _, anchor = target.partition("#")
                dest = rel if not file_part else os.path.normpath(
                    os.path.join(os.path.dirname(rel), file_part))
                full = os.path.join(root, dest)
                if dest.startswith(".."):
                    problems.append(f"{rel}:{n}: {target}: outside the repository")
                    continue
                if not os.path.exists(full):
                    problems.append(f"{rel}:{n}: {target}: {dest} does not exist")
                    continue
                if anchor:
                    if not dest.endswith(".md") or os.path.isdir(full):
                        problems.append(f"{rel}:{n}: {target}: an anchor into a file that is not Markdown")
                        continue
                    if dest not in cache:
                        cache[dest] = anchors(full)
                    if anchor not in cache[dest]:
                        problems.append(f"{rel}:{n}: {target}: {dest} has no heading #{anchor}")
    return problems


def main(argv=None):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=here)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test:
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(SelfTest)
        return 0 if unittest.TextTestRunner(verbosity=1).run(suite).wasSuccessful() else 1
    problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"doclinks: {len(problems)} broken link(s)", file=sys.stderr)
        return 1
    return 0


class SelfTest(unittest.TestCase):
    def test_slugs(self):
        self.assertEqual(slug("The built-in fix: `multiconnector-observe`"),
                         "the-built-in-fix-multiconnector-observe")
        self.assertEqual(slug("Provenance and signatures"), "provenance-and-signatures")
        self.assertEqual(slug("10. Verify"), "10-verify")
        self.assertEqual(slug("`diff`"), "diff")

    def test_links(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "docs"))
            with open(os.path.join(d, "README.md"), "w") as f:
                f.write("# Top\n\n## Bounds\n\n## Bounds\n\n[a](docs/x.md#one) [b](#bounds-1) "
                        "[c](docs/gone.md) [d](#nowhere) [e](https://example.org/x#y)\n"
                        "`[f](docs/gone.md)` and\n\n```\n[g](docs/gone.md)\n```\n\n    [h](gone.md)\n"
                        "[i](docs/x.md#two) [j](docs/) [k](../up.md)\n")
            with open(os.path.join(d, "docs", "x.md"), "w") as f:
                f.write("# One\n\n```\n# Two\n```\n[back](../README.md#top)\n")
            self.assertEqual(check(d), [
                "README.md:7: docs/gone.md: docs/gone.md does not exist",
                "README.md:7: #nowhere: README.md has no heading #nowhere",
                "README.md:15: docs/x.md#two: docs/x.md has no heading #two",
                "README.md:15: ../up.md: outside the repository",
            ])


if __name__ == "__main__":
    sys.exit(main())
