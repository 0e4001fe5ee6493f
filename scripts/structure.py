#!/usr/bin/env python3
"""Structure check of the Rust sources (`make lint`): the shape rules of DEVELOPERS.md that
rustc and clippy do not check.

    python3 scripts/structure.py              # check; one line per violation, exit 1 if any
    python3 scripts/structure.py --modules    # also list every source file with its step
    python3 scripts/structure.py --self-test  # the checks on tiny fake trees

Violations, each printed as `path:line: what`:
- an import cycle between source files of src/: file A refers to B and B to A through any
  chain. References are `use` trees (`crate::`, `super::`, `self::`, `runner_patch::`, and
  paths relative to a child module) and fully qualified paths in code (`crate::a::b::f()`).
  Each resolves to the file that defines the module it reaches: `use crate::a::b::Item` gives
  b's file when b is a module, a's file when b is an item. A `mod x;` declaration is
  containment, not use (with `--mod-edges` it counts as a use of x's file too). Test code
  (`#[cfg(test)]` items, files named `tests.rs`) is left out: tests may use anything;
- a source file over 500 lines (all of its lines; files named `tests.rs` are exempt);
- a function over 80 lines, from its `fn` line to its closing brace, outside test code;
- a source file that no `mod` declaration reaches (it is not compiled);
- docs/architecture.md out of step with the code: every `src/...` path it names must exist,
  and every source file (but `tests.rs`) must be named in it. The `## ` section that names a
  file is the data-flow step `--modules` shows for it.

Python 3 standard library only. The lexer blanks comments, strings and character literals
before anything is read, so a path in a doc comment or a message is not a reference.
"""

import argparse
import os
import re
import sys
import tempfile
import unittest

MAX_FILE_LINES = 500
MAX_FN_LINES = 80
ARCH_DOC = "docs/architecture.md"

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# ---------------------------------------------------------------------------------------------
# Lexing: blank what is not code, keeping every offset and line break.


def _is_ident_char(c):
    return c.isalnum() or c == "_"


def strip_code(text):
    """`text` with comments, string, byte-string and char literals replaced by spaces
    (newlines kept), so offsets and line numbers stay those of the file."""
    out = list(text)
    n = len(text)
    i = 0

    def blank(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c == "r" and (i == 0 or not _is_ident_char(text[i - 1]) or
                           (text[i - 1] == "b" and (i < 2 or not _is_ident_char(text[i - 2])))):
            m = re.compile(r'r(#*)"').match(text, i)
            if not m:
                i += 1
                continue
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            blank(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        elif c == "'":
            if nxt == "\\":
                j = text.find("'", i + 2)
                j = n if j < 0 else j
                blank(i, j + 1)
                i = j + 1
            elif i + 2 < n and text[i + 2] == "'" and nxt != "\n":
                blank(i, i + 3)
                i += 3
            else:
                i += 1  # a lifetime or a label
        else:
            i += 1
    return "".join(out)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def match_close(code, open_at):
    """Offset just past the bracket closing the one at `open_at` (same kind), or len(code)."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    opening = code[open_at]
    closing = pairs[opening]
    depth = 0
    for j in range(open_at, len(code)):
        ch = code[j]
        if ch == opening:
            depth += 1
        elif ch == closing:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def item_end(code, start):
    """Offset just past the item starting at `start`: its first `;` or its `{...}` block,
    whichever comes first outside parentheses and brackets."""
    depth = 0
    for j in range(start, len(code)):
        ch = code[j]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch == ";":
            return j + 1
        elif depth == 0 and ch == "{":
            return match_close(code, j)
    return len(code)


CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
ATTR = re.compile(r"\s*#\s*\[")


def test_spans(code):
    """(start, end) of every item marked `#[cfg(test)]` (its attributes included)."""
    if re.search(r"#!\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]", code):
        return [(0, len(code))]
    spans = []
    for m in CFG_TEST.finditer(code):
        if spans and m.start() < spans[-1][1]:
            continue
        j = m.end()
        while True:  # further attributes of the same item
            a = ATTR.match(code, j)
            if not a:
                break
            j = match_close(code, a.end() - 1)
        spans.append((m.start(), item_end(code, j)))
    return spans


def in_spans(offset, spans):
    return any(a <= offset < b for a, b in spans)


# ---------------------------------------------------------------------------------------------
# The module tree.


MOD_DECL = re.compile(r"(?<![\w:])(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(" + IDENT.pattern + r")\s*([;{])")


class Source:
    """One .rs file: its text, code (blanked), test spans and, once reached, its module."""

    def __init__(self, root, rel):
        self.rel = rel
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            self.text = f.read()
        self.code = strip_code(self.text)
        self.tests = test_spans(self.code)
        self.crate = None  # "lib" or "bin"
        self.path = None  # module path, a tuple of names
        self.test_only = os.path.basename(rel) == "tests.rs"
        self.inline = []  # (start, end, name) of inline modules outside test code

    def line(self, offset):
        return line_of(self.text, offset)

    def module_at(self, offset):
        """The module path at `offset`, inline modules included."""
        path = list(self.path)
        for a, b, name in self.inline:
            if a <= offset < b:
                path.append(name)
        return tuple(path)


def child_file(sources, parent_rel, name):
    """The file a `mod name;` in `parent_rel` loads, or None."""
    d, base = os.path.split(parent_rel)
    if base not in ("mod.rs", "lib.rs", "main.rs"):
        d = os.path.join(d, base[:-3])
    for cand in (os.path.join(d, name + ".rs"), os.path.join(d, name, "mod.rs")):
        if cand in sources:
            return cand
    return None


def build_tree(root):
    """Every .rs file under src/, and the modules: {(crate, path): file}."""
    sources = {}
    for d, _dirs, files in os.walk(os.path.join(root, "src")):
        for f in files:
            if f.endswith(".rs"):
                rel = os.path.relpath(os.path.join(d, f), root)
                sources[rel] = Source(root, rel)
    modules = {}
    children = {}  # (crate, path) -> names of child modules (files and inline)
    queue = []
    for crate, rel in (("lib", os.path.join("src", "lib.rs")), ("bin", os.path.join("src", "main.rs"))):
        if rel in sources:
            queue.append((crate, (), rel, False))
    while queue:
        crate, path, rel, test_only = queue.pop()
        src = sources[rel]
        if src.crate is not None:
            continue
        src.crate, src.path = crate, path
        src.test_only = src.test_only or test_only
        modules[(crate, path)] = rel
        for m in MOD_DECL.finditer(src.code):
            name, kind = m.group(1), m.group(2)
            in_test = src.test_only or in_spans(m.start(), src.tests)
            if kind == "{":
                end = match_close(src.code, m.end() - 1)
                if not in_test:
                    src.inline.append((m.start(), end, name))
                continue
            outer = src.module_at(m.start())
            children.setdefault((crate, outer), set()).add(name)
            target = child_file(sources, rel, name) if outer == path else None
            if target:
                queue.append((crate, outer + (name,), target, in_test))
        for a, _b, name in src.inline:
            outer = src.module_at(a)
            modules[(crate, outer + (name,))] = rel
            children.setdefault((crate, outer), set()).add(name)
    return sources, modules, children


# ---------------------------------------------------------------------------------------------
# References between files.


USE = re.compile(r"(?<![\w:$])use\s+")
VIS_IN = re.compile(r"pub\s*\(\s*in\s+[^)]*\)")
QUALIFIED = re.compile(r"(?<![\w:$])(crate|super|self|runner_patch|" + IDENT.pattern +
                       r")((?:\s*::\s*" + IDENT.pattern + r")+)")


def parse_use_tree(s):
    """The paths a use tree names, each a list of segments (`self` resolved, globs and
    renames dropped): `a::{b, c::{self, d}}` -> [[a, b], [a, c], [a, c, d]]."""
    tokens = re.findall(r"::|[{},*]|" + IDENT.pattern, s)
    pos = 0

    def tree(prefix):
        nonlocal pos
        path, named, out = list(prefix), False, []
        while pos < len(tokens):
            t = tokens[pos]
            if t == "::":
                pos += 1
            elif t == "{":
                pos += 1
                while pos < len(tokens) and tokens[pos] != "}":
                    if tokens[pos] == ",":
                        pos += 1
                    else:
                        out.extend(tree(path))
                pos += 1
                return out
            elif t == "*":
                pos += 1
                return out + [path]
            elif t in (",", "}"):
                break
            elif t == "as":
                pos += 2  # `as name`
            elif t == "self" and prefix and path == list(prefix):
                pos += 1  # `a::{self}` names a itself
                named = True
            else:
                path.append(t)
                pos += 1
                named = True
        return out + [path] if named else out

    return [p for p in tree([]) if p]


def resolve(src, offset, segments, modules, children):
    """The file a path used in `src` at `offset` reaches, or None (another crate, a local
    item)."""
    here = src.module_at(offset)
    crate = src.crate
    segs = list(segments)
    first = segs[0]
    if first == "crate":
        base, segs = (), segs[1:]
    elif first == "runner_patch":
        crate, base, segs = "lib", (), segs[1:]
    elif first == "self":
        base, segs = here, segs[1:]
    elif first == "super":
        base = here
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
    elif first in children.get((crate, here), ()):
        base = here
    else:
        return None
    if (crate, base) not in modules:
        return None
    for s in segs:
        if (crate, base + (s,)) in modules:
            base = base + (s,)
        else:
            break
    return modules[(crate, base)]


def references(src, modules, children, mod_edges=False):
    """{target file: first line} of what `src` refers to outside its test code."""
    found = {}
    code = VIS_IN.sub(lambda m: " " * len(m.group(0)), src.code)

    def add(offset, segments):
        if in_spans(offset, src.tests) or not segments:
            return
        target = resolve(src, offset, segments, modules, children)
        if target and target != src.rel and target not in found:
            found[target] = src.line(offset)

    blanked = list(code)
    for m in USE.finditer(code):
        end = item_end(code, m.end())
        for segments in parse_use_tree(code[m.end():end].rstrip(";")):
            add(m.start(), segments)
        for k in range(m.start(), end):
            if blanked[k] != "\n":
                blanked[k] = " "
    rest = "".join(blanked)
    for m in QUALIFIED.finditer(rest):
        segments = [m.group(1)] + re.findall(IDENT.pattern, m.group(2))
        add(m.start(), segments)
    if mod_edges:
        for m in MOD_DECL.finditer(code):
            if m.group(2) == ";":
                add(m.start(), ["self", m.group(1)])
    return found


def strongly_connected(graph):
    """Tarjan's components of `graph` ({node: {node: line}}), each a sorted list."""
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    sys.setrecursionlimit(max(1000, 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def cycles(graph):
    """One shortest cycle through each file that is on a cycle, rotations removed: a list of
    file lists [a, b, ..., a]."""
    out, seen = [], set()
    for comp in strongly_connected(graph):
        if len(comp) < 2:
            continue
        members = set(comp)
        for start in comp:
            prev = {start: None}
            queue, found = [start], None
            while queue and found is None:
                nxt = []
                for v in queue:
                    for w in sorted(graph.get(v, {})):
                        if w not in members:
                            continue
                        if w == start:
                            found = v
                            break
                        if w not in prev:
                            prev[w] = v
                            nxt.append(w)
                    if found is not None:
                        break
                queue = nxt
            path = [found]
            while path[-1] != start:
                path.append(prev[path[-1]])
            path.reverse()
            key = frozenset(zip(path, path[1:] + [start]))
            if key not in seen:
                seen.add(key)
                out.append(path + [start])
    return out


# ---------------------------------------------------------------------------------------------
# The checks.


FN = re.compile(r"(?<![\w$])fn\s+(" + IDENT.pattern + r")")


def long_functions(src):
    """(line, name, lines) of every function over the limit outside test code."""
    out = []
    for m in FN.finditer(src.code):
        if in_spans(m.start(), src.tests):
            continue
        end = item_end(src.code, m.end())
        if src.code[end - 1] != "}":
            continue  # a declaration without a body
        first, last = src.line(m.start()), src.line(end - 1)
        if last - first + 1 > MAX_FN_LINES:
            out.append((first, m.group(1), last - first + 1))
    return out


ARCH_PATH = re.compile(r"(?<![\w/.-])src/[A-Za-z0-9_./-]*[A-Za-z0-9_/]")


def read_architecture(root):
    """({src path: [step, ...]}, [(line, path)] of every src/ path named), or None."""
    p = os.path.join(root, ARCH_DOC)
    if not os.path.exists(p):
        return None
    steps, named = {}, []
    step = None
    with open(p, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("## "):
                step = line[3:].strip()
            for m in ARCH_PATH.finditer(line):
                named.append((n, m.group(0)))
                if step:
                    steps.setdefault(m.group(0), [])
                    if step not in steps[m.group(0)]:
                        steps[m.group(0)].append(step)
    return steps, named


def step_of(rel, steps):
    """The step(s) a file belongs to; a `tests.rs` takes its module's."""
    if rel in steps:
        return ", ".join(steps[rel])
    if os.path.basename(rel) == "tests.rs":
        d = os.path.dirname(rel)
        for owner in (os.path.join(d, "mod.rs"), d + ".rs"):
            if owner in steps:
                return "tests of " + owner
    return "?"


def check(root, mod_edges=False):
    """Every violation as `path:line: what`, and the module list [(file, step)]."""
    sources, modules, children = build_tree(root)
    problems = []

    for rel in sorted(sources):
        if sources[rel].crate is None:
            problems.append(f"{rel}:1: no `mod` declaration reaches this file: it is not compiled")

    graph = {}
    for rel, src in sorted(sources.items()):
        if src.crate is None or src.test_only:
            continue
        graph[rel] = {t: line for t, line in references(src, modules, children, mod_edges).items()
                      if not sources[t].test_only}
    for cyc in cycles(graph):
        a, b = cyc[0], cyc[1]
        problems.append(f"{a}:{graph[a][b]}: import cycle: " + " -> ".join(cyc))

    for rel, src in sorted(sources.items()):
        if src.test_only:
            continue
        n = src.text.count("\n") + (0 if src.text.endswith("\n") or not src.text else 1)
        if n > MAX_FILE_LINES:
            problems.append(f"{rel}:1: {n} lines, over {MAX_FILE_LINES}")
        for line, name, length in long_functions(src):
            problems.append(f"{rel}:{line}: fn {name} has {length} lines, over {MAX_FN_LINES}")

    arch = read_architecture(root)
    steps = {}
    if arch is None:
        problems.append(f"{ARCH_DOC}:1: missing: it must name every source file by data-flow step")
    else:
        steps, named = arch
        for line, p in named:
            if not os.path.exists(os.path.join(root, p)):
                problems.append(f"{ARCH_DOC}:{line}: names {p}, which does not exist")
        for rel, src in sorted(sources.items()):
            if os.path.basename(rel) != "tests.rs" and rel not in steps:
                problems.append(f"{rel}:1: not named in a step of {ARCH_DOC}")
    listing = [(rel, step_of(rel, steps)) for rel in sorted(sources)]
    return problems, listing


def main(argv=None):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=here, help="the repository (default: this script's)")
    ap.add_argument("--modules", action="store_true",
                    help="list every source file with its data-flow step, then check")
    ap.add_argument("--mod-edges", action="store_true",
                    help="count `mod x;` as a use of x's file when looking for cycles")
    ap.add_argument("--self-test", action="store_true", help="run the script's own tests")
    args = ap.parse_args(argv)
    if args.self_test:
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(SelfTest)
        ok = unittest.TextTestRunner(verbosity=1).run(suite).wasSuccessful()
        return 0 if ok else 1
    problems, listing = check(args.root, args.mod_edges)
    if args.modules:
        width = max((len(rel) for rel, _ in listing), default=0)
        for rel, step in listing:
            print(f"{rel:<{width}}  {step}")
    for p in problems:
        print(p)
    if problems:
        print(f"structure: {len(problems)} violation(s)", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# Self-test: tiny fake trees.


def fn_lines(name, n, indent=""):
    """A function of exactly `n` lines (its `fn` line to its closing brace)."""
    body = [f"{indent}    let _x = {k};" for k in range(n - 2)]
    return [f"{indent}fn {name}() {{"] + body + [f"{indent}}}"]


class SelfTest(unittest.TestCase):
    def tree(self, files):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        for rel, text in files.items():
            p = os.path.join(d.name, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
        return d.name

    def arch(self, *paths):
        return "# Architecture\n\n## 1. reference\n\n" + ", ".join(f"`{p}`" for p in paths) + "\n"

    def run_check(self, files, **kw):
        problems, listing = check(self.tree(files), **kw)
        return problems, dict(listing)

    def test_strip_code(self):
        code = strip_code('let s = "crate::a::X // not"; // crate::b\nlet c = \'"\'; /* a /* nested */ b */ x\n'
                          "let r = r#\"crate::c \"quoted\"\"#; fn f<'a>(x: &'a str) {}\n")
        self.assertNotIn("crate::", code)
        self.assertIn("fn f<'a>(x: &'a str) {}", code)
        self.assertEqual(code.count("\n"), 3)
        self.assertTrue(code.rstrip().endswith("{}"))

    def test_use_tree(self):
        self.assertEqual(parse_use_tree("crate::a::{b, c::{self, d as e}, f::*}"),
                         [["crate", "a", "b"], ["crate", "a", "c"], ["crate", "a", "c", "d"],
                          ["crate", "a", "f"]])
        self.assertEqual(parse_use_tree("super::*"), [["super"]])
        self.assertEqual(parse_use_tree("crate::media::{self, Descriptor}"),
                         [["crate", "media"], ["crate", "media", "Descriptor"]])

    def test_cycle_through_a_chain_is_found_and_resolved_to_files(self):
        files = {
            "src/lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
            "src/a.rs": "use crate::b::Thing;\npub struct A;\n",
            # `c::inner` is a module: the use resolves to src/c/inner.rs, not src/c/mod.rs.
            "src/b.rs": "pub struct Thing;\nfn f() { crate::c::inner::g(); }\n",
            "src/c/mod.rs": "pub mod inner;\npub struct C;\n",
            "src/c/inner.rs": "// crate::b is named here only in a comment\npub fn g() { let _ = crate::a::A; }\n",
        }
        files["docs/architecture.md"] = self.arch(*[p for p in files if p.startswith("src/")])
        problems, _ = self.run_check(files)
        self.assertEqual(problems, [
            "src/a.rs:1: import cycle: src/a.rs -> src/b.rs -> src/c/inner.rs -> src/a.rs"])

    def test_item_resolves_to_its_module_file(self):
        files = {
            "src/lib.rs": "pub mod a;\npub mod b;\n",
            "src/a/mod.rs": "pub mod x;\npub struct Item;\n",
            "src/a/x.rs": "use crate::b::B;\n",
            # Item is an item of a: the use names src/a/mod.rs, which does not use b: no cycle.
            "src/b.rs": "use crate::a::Item;\npub struct B;\n",
        }
        files["docs/architecture.md"] = self.arch(*[p for p in files if p.startswith("src/")])
        problems, _ = self.run_check(files)
        self.assertEqual(problems, [])
        files["src/b.rs"] = "use crate::a::x;\npub struct B;\n"
        problems, _ = self.run_check(files)
        self.assertEqual(problems, ["src/a/x.rs:1: import cycle: src/a/x.rs -> src/b.rs -> src/a/x.rs"])

    def test_super_self_relative_and_binary_paths(self):
        files = {
            "src/lib.rs": "pub mod reg;\n",
            "src/reg/mod.rs": "mod auth;\nmod transport;\nuse auth::Auth;\npub struct Http;\n",
            "src/reg/auth.rs": "use super::transport::send;\npub struct Auth;\n",
            "src/reg/transport.rs": "pub fn send() { let _ = super::Http; }\n",
            "src/main.rs": "mod cmd;\nfn main() {}\n",
            "src/cmd.rs": "use runner_patch::reg;\n",
        }
        files["docs/architecture.md"] = self.arch(*[p for p in files if p.startswith("src/")])
        problems, _ = self.run_check(files)
        self.assertEqual(problems, [
            "src/reg/auth.rs:1: import cycle: src/reg/auth.rs -> src/reg/transport.rs -> "
            "src/reg/mod.rs -> src/reg/auth.rs"])

    def test_mod_edges_are_optional(self):
        files = {
            "src/lib.rs": "pub mod p;\n",
            "src/p/mod.rs": "pub mod kind;\npub enum Verdict { A }\n",
            "src/p/kind.rs": "use super::Verdict;\n",
        }
        files["docs/architecture.md"] = self.arch(*[p for p in files if p.startswith("src/")])
        self.assertEqual(self.run_check(files)[0], [])
        self.assertEqual(self.run_check(files, mod_edges=True)[0], [
            "src/p/kind.rs:1: import cycle: src/p/kind.rs -> src/p/mod.rs -> src/p/kind.rs"])

    def test_test_code_is_left_out(self):
        long_test = "\n".join(fn_lines("big_test", 120, "    "))
        files = {
            "src/lib.rs": "pub mod a;\npub mod b;\n",
            "src/a/mod.rs": "use crate::b::B;\npub struct A;\n#[cfg(test)]\nmod tests;\n"
                            f"#[cfg(test)]\n#[allow(dead_code)]\nmod more {{\n    use crate::b::B;\n{long_test}\n}}\n",
            "src/a/tests.rs": "use crate::b::B;\n" + "\n".join(fn_lines("huge", 700)) + "\n",
            "src/b.rs": "pub struct B;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
        }
        files["docs/architecture.md"] = self.arch("src/lib.rs", "src/a/mod.rs", "src/b.rs")
        problems, listing = self.run_check(files)
        self.assertEqual(problems, [])
        self.assertEqual(listing["src/a/tests.rs"], "tests of src/a/mod.rs")

    def test_long_function_and_long_file(self):
        ok = fn_lines("fits", MAX_FN_LINES)
        long = fn_lines("too_long", MAX_FN_LINES + 1)
        sig = ["pub fn spread(", "    x: [u8; 4],", ") -> u8 {"] + ["    0;"] * 80 + ["}"]
        trait = ["trait T {", "    fn declared(&self);", "}"]
        text = "\n".join(ok + long + sig + trait) + "\n"
        big = "\n".join(["pub struct S;"] + ["// filler"] * MAX_FILE_LINES) + "\n"
        files = {
            "src/lib.rs": "pub mod a;\npub mod big;\n",
            "src/a.rs": text,
            "src/big.rs": big,
            "docs/architecture.md": self.arch("src/lib.rs", "src/a.rs", "src/big.rs"),
        }
        problems, _ = self.run_check(files)
        self.assertEqual(problems, [
            f"src/a.rs:{MAX_FN_LINES + 1}: fn too_long has {MAX_FN_LINES + 1} lines, over {MAX_FN_LINES}",
            f"src/a.rs:{2 * MAX_FN_LINES + 2}: fn spread has 84 lines, over {MAX_FN_LINES}",
            f"src/big.rs:1: {MAX_FILE_LINES + 1} lines, over {MAX_FILE_LINES}",
        ])

    def test_architecture_doc_against_the_code(self):
        files = {
            "src/lib.rs": "pub mod a;\npub mod b;\n",
            "src/a.rs": "",
            "src/b.rs": "",
            "src/orphan.rs": "",
            "docs/architecture.md": "# Code\n\nThe root: `src/lib.rs`.\n\n## 1. reference\n\n`src/a.rs` "
                                    "and `src/gone.rs`.\n\n## 2. push\n\n`src/lib.rs`, `src/a.rs`, `src/orphan.rs`.\n",
        }
        problems, listing = self.run_check(files)
        self.assertEqual(problems, [
            "src/orphan.rs:1: no `mod` declaration reaches this file: it is not compiled",
            "docs/architecture.md:7: names src/gone.rs, which does not exist",
            "src/b.rs:1: not named in a step of docs/architecture.md",
        ])
        self.assertEqual(listing["src/a.rs"], "1. reference, 2. push")
        self.assertEqual(listing["src/lib.rs"], "2. push")
        self.assertEqual(listing["src/b.rs"], "?")
        del files["docs/architecture.md"]
        problems, _ = self.run_check(files)
        self.assertIn("docs/architecture.md:1: missing: it must name every source file by data-flow step",
                      problems)

    def test_main_exit_status(self):
        root = self.tree({"src/lib.rs": "", "docs/architecture.md": self.arch("src/lib.rs")})
        self.assertEqual(main(["--root", root]), 0)
        root = self.tree({"src/lib.rs": "", "docs/architecture.md": self.arch()})
        with open(os.devnull, "w") as null:
            saved, sys.stdout = sys.stdout, null
            saved_err, sys.stderr = sys.stderr, null
            try:
                self.assertEqual(main(["--root", root]), 1)
            finally:
                sys.stdout, sys.stderr = saved, saved_err


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # a reader such as `head` went away: stop quietly
        sys.stderr.close()
        sys.exit(1)
