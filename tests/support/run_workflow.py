#!/usr/bin/env python3
"""Run a GitHub Actions workflow's jobs locally, the way the runner would, so an example
workflow is exercised rather than only linted.

    python3 -m tests.support.run_workflow WORKFLOW --work DIR
        [--input K=V]... [--secret K=V]... [--var K=V]... [--path DIR]... [--watch FILE]...

Jobs run in `needs` order, each as on a fresh machine (its own workspace and RUNNER_TEMP);
steps in order. A job with `strategy.matrix` (axes of lists, `include`, `exclude`, or an
expression such as `${{ fromJSON(needs.plan.outputs.matrix) }}`) runs once per combination,
one after the other, each on its own machine with its `matrix` context; the job's result is
`failure` when any of them failed, and its outputs are the last one's. `run:` blocks run with the step's shell and the merged `env:` maps (workflow,
job, step); GITHUB_ENV, GITHUB_PATH, GITHUB_OUTPUT and GITHUB_STEP_SUMMARY files work as on
GitHub, with GITHUB_ACTIONS=true. `${{ }}` expressions are evaluated only for the small
grammar this project's workflows use (contexts inputs, secrets, vars, github, runner, steps,
needs, env, matrix; `||`, `&&`, `==`, `!=`, `!`, parentheses, string literals, always(),
success(), failure(), fromJSON(x)); anything else is an error, never silently empty. A
composite action runs its steps in order (`uses: ./` from `--checkout`, default the current
directory, or `uses: OWNER/NAME@ref` mapped to a folder by `--action OWNER/NAME=DIR`). Other `uses:`
steps are simulated for actions/upload-artifact and actions/download-artifact (DIR/artifacts/
NAME/; `name`, or `pattern` with `merge-multiple`) and actions/cache/save and restore (exact
key, DIR/caches/KEY/); any other action is an error. YAML anchors and aliases are read as
PyYAML reads them. The `environment:` approval gate is
recorded as approved. `--watch FILE` records FILE's size before and after each run step
(`watch` in the report), so a caller can tell which step wrote which lines of a log.

Writes DIR/report.json: {"ok", "jobs": [{"id", "matrix" (a matrix job's combination),
"result", "environment", "outputs", "steps": [{"name", "kind", "outcome", "exit_code"}]}]},
and DIR/summary-JOB.md (the job summary; DIR/summary-JOB-K.md for a matrix job's K-th run).
Exit status: 0 when every job succeeded or was skipped by its `if:`, 1 otherwise.
Needs PyYAML.
"""

import argparse
import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

# One `${{ }}`, never reaching into the next (a whole-value match must not span two).
EXPR = re.compile(r"\$\{\{((?:(?!\}\}).)*)\}\}", re.S)
SHELLS = {
    "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail", "{0}"],
    "sh": ["sh", "-e", "{0}"],
}


class WorkflowError(Exception):
    pass


def kv(items):
    out = {}
    for it in items or []:
        k, sep, v = it.partition("=")
        if not sep:
            raise SystemExit(f"expected K=V, got {it!r}")
        out[k] = v
    return out


def tokens(expr):
    pat = re.compile(r"\s*(?:('(?:[^']|'')*')|(\|\||&&|==|!=|!|\(|\))|([A-Za-z_][\w.-]*(?:\(\))?))")
    pos, out = 0, []
    expr = expr.strip()
    while pos < len(expr):
        m = pat.match(expr, pos)
        if not m or m.end() == pos:
            raise WorkflowError(f"cannot read expression {expr!r} at {expr[pos:]!r}")
        pos = m.end()
        lit, op, name = m.groups()
        if lit is not None:
            out.append(("lit", lit[1:-1].replace("''", "'")))
        elif op is not None:
            out.append(("op", op))
        else:
            out.append(("name", name))
    return out


def evaluate(expr, ctx):
    """Evaluates one `${{ }}` body; the grammar is an or of ands of comparisons of terms."""
    toks = tokens(expr)
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else (None, None)

    def term():
        nonlocal pos
        kind, val = peek()
        pos += 1
        if kind == "lit":
            return val
        if kind == "op" and val == "!":
            return not truthy(term())
        if kind == "op" and val == "(":
            v = disj()
            if peek() != ("op", ")"):
                raise WorkflowError(f"unbalanced parentheses in {expr!r}")
            pos += 1
            return v
        if kind == "name" and peek() == ("op", "("):
            pos += 1
            arg = disj()
            if peek() != ("op", ")"):
                raise WorkflowError(f"unbalanced parentheses in {expr!r}")
            pos += 1
            return call(val, arg, expr)
        if kind == "name":
            return lookup(val, ctx, expr)
        raise WorkflowError(f"unexpected {val!r} in {expr!r}")

    def comparison():
        nonlocal pos
        left = term()
        kind, val = peek()
        if kind == "op" and val in ("==", "!="):
            pos += 1
            right = term()
            same = str(left if left is not None else "") == str(right if right is not None else "")
            return same if val == "==" else not same
        return left

    def conj():
        nonlocal pos
        v = comparison()
        while peek() == ("op", "&&"):
            pos += 1
            r = comparison()
            v = r if truthy(v) else v
        return v

    def disj():
        nonlocal pos
        v = conj()
        while peek() == ("op", "||"):
            pos += 1
            r = conj()
            v = v if truthy(v) else r
        return v

    v = disj()
    if pos != len(toks):
        raise WorkflowError(f"trailing tokens in {expr!r}")
    return v


def call(fn, arg, expr):
    if fn == "fromJSON":
        try:
            return json.loads(arg if isinstance(arg, str) else json.dumps(arg))
        except ValueError as e:
            raise WorkflowError(f"fromJSON of {arg!r}: {e} ({expr!r})")
    raise WorkflowError(f"function {fn}() is not supported by this runner ({expr!r})")


def truthy(v):
    return v not in (None, "", False, 0)


def lookup(name, ctx, expr):
    if name.endswith("()"):
        fn = name[:-2]
        if fn == "always":
            return True
        if fn == "success":
            return not ctx["failed"]
        if fn == "failure":
            return ctx["failed"]
        raise WorkflowError(f"function {fn}() is not supported by this runner ({expr!r})")
    parts = name.split(".")
    root = parts[0]
    if root not in ("inputs", "secrets", "vars", "github", "runner", "steps", "needs", "env", "matrix"):
        raise WorkflowError(f"context {root!r} is not supported by this runner ({expr!r})")
    cur = ctx[root]
    for p in parts[1:]:
        if not isinstance(cur, dict):
            raise WorkflowError(f"{name} does not name a value ({expr!r})")
        cur = cur.get(p)
        if cur is None:
            # Like GitHub: an unset input, secret, variable or output is empty.
            if root in ("inputs", "secrets", "vars") or "outputs" in parts:
                return ""
            raise WorkflowError(f"{name} is not defined ({expr!r})")
    return cur


def value_of(value, ctx):
    """A value that may be one whole `${{ }}` expression, evaluated to what it gives (a
    matrix from fromJSON), else substituted as text."""
    if isinstance(value, str):
        whole = EXPR.fullmatch(value.strip())
        if whole:
            return evaluate(whole.group(1), ctx)
    return substitute(value, ctx)


def combinations(matrix):
    """The job runs a `strategy.matrix` asks for: axes crossed, `exclude` taken out, `include`
    entries added (or merged into the combinations they extend, as GitHub does)."""
    if not isinstance(matrix, dict):
        raise WorkflowError(f"matrix {matrix!r} is not a mapping")
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    combos = [{}]
    for k, values in axes.items():
        if not isinstance(values, list):
            raise WorkflowError(f"matrix axis {k} is not a list")
        combos = [dict(c, **{k: v}) for c in combos for v in values]
    if not axes:
        combos = []
    for ex in matrix.get("exclude") or []:
        combos = [c for c in combos if any(c.get(k) != v for k, v in ex.items())]
    originals = list(combos)
    for inc in matrix.get("include") or []:
        extended = False
        for c in originals:
            if all(c.get(k) == v for k, v in inc.items() if k in axes):
                c.update({k: v for k, v in inc.items() if k not in axes})
                extended = True
        if not extended:
            combos.append(dict(inc))
    if not combos:
        raise WorkflowError("the matrix has no combination")
    return combos


def substitute(value, ctx):
    if not isinstance(value, str):
        return value
    whole = EXPR.fullmatch(value.strip())
    if whole:
        v = evaluate(whole.group(1), ctx)
        return "" if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
    return EXPR.sub(lambda m: str(evaluate(m.group(1), ctx) or ""), value)


def condition(cond, ctx):
    if cond is None:
        return not ctx["failed"]
    if isinstance(cond, bool):
        return cond
    text = cond.strip()
    m = EXPR.fullmatch(text)
    body = m.group(1) if m else text
    # GitHub adds success() unless the condition names a status function.
    v = evaluate(body, ctx)
    if not re.search(r"\b(always|failure|success|cancelled)\(\)", body) and ctx["failed"]:
        return False
    return truthy(v)


def read_env_file(path):
    """GITHUB_ENV / GITHUB_OUTPUT: `K=V` lines, or `K<<DELIM` ... `DELIM` blocks."""
    out = {}
    if not os.path.exists(path):
        return out
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delim = line.split("<<", 1)
            val = []
            while i < len(lines) and lines[i] != delim:
                val.append(lines[i])
                i += 1
            i += 1
            out[key] = "\n".join(val)
        else:
            key, _, val = line.partition("=")
            out[key] = val
    return out


def topo(jobs):
    order, seen = [], set()

    def visit(j, stack=()):
        if j in seen:
            return
        if j in stack:
            raise WorkflowError(f"job {j} needs itself")
        needs = jobs[j].get("needs") or []
        for n in [needs] if isinstance(needs, str) else needs:
            if n not in jobs:
                raise WorkflowError(f"job {j} needs unknown job {n}")
            visit(n, stack + (j,))
        seen.add(j)
        order.append(j)

    for j in jobs:
        visit(j)
    return order


def upload_artifact(with_, workspace, artifacts):
    name = with_.get("name") or "artifact"
    dest = os.path.join(artifacts, name)
    os.makedirs(dest, exist_ok=True)
    found = 0
    for pattern in str(with_.get("path", "")).split("\n"):
        pattern = pattern.strip()
        if not pattern:
            continue
        for src in glob.glob(os.path.join(workspace, pattern)):
            found += 1
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(dest, os.path.basename(src)), dirs_exist_ok=True)
            else:
                shutil.copy2(src, dest)
    if not found and with_.get("if-no-files-found", "warn") == "error":
        raise WorkflowError(f"upload-artifact {name}: no files match {with_.get('path')!r}")
    return f"{found} path(s) uploaded as {name}"


def download_artifact(with_, workspace, artifacts):
    dest = os.path.join(workspace, with_.get("path") or ".")
    name = with_.get("name")
    if name:
        src = os.path.join(artifacts, name)
        if not os.path.isdir(src):
            raise WorkflowError(f"download-artifact: no artifact {name}")
        shutil.copytree(src, dest, dirs_exist_ok=True)
        return f"artifact {name} downloaded"
    # Every artifact whose name matches `pattern`: each in its own folder, or all in one.
    pattern = with_.get("pattern") or "*"
    merge = str(with_.get("merge-multiple", "false")).lower() == "true"
    names = sorted(n for n in os.listdir(artifacts) if fnmatch.fnmatchcase(n, pattern))
    for n in names:
        shutil.copytree(os.path.join(artifacts, n), dest if merge else os.path.join(dest, n),
                        dirs_exist_ok=True)
    return f"{len(names)} artifact(s) matching {pattern} downloaded"


def cache_save(with_, caches):
    src = with_.get("path", "").strip()
    dest = os.path.join(caches, with_["key"])
    if not os.path.isdir(src):
        return f"cache {with_['key']}: {src} does not exist, nothing saved"
    shutil.copytree(src, dest, dirs_exist_ok=True)
    return f"cache {with_['key']} saved"


def cache_restore(with_, caches):
    src = os.path.join(caches, with_["key"])
    if not os.path.isdir(src):
        return f"cache {with_['key']}: miss", "false"
    shutil.copytree(src, with_.get("path", "").strip(), dirs_exist_ok=True)
    return f"cache {with_['key']}: restored", "true"


def watched(paths):
    return [os.path.getsize(p) if os.path.exists(p) else 0 for p in paths]


def composite(action, with_, ctx, args, script_step, key):
    """Runs a composite action of this checkout (`uses: ./DIR`, or an `owner/name` mapped by
    `--action owner/name=DIR`): its inputs from `with:` over their defaults, each step's
    `env:` evaluated with them, its `run:` scripts in order (a failed one ends it), and its
    outputs from its steps'."""
    root = args.actions.get(action) or os.path.join(args.checkout, action[2:])
    path = next((os.path.join(root, n) for n in ("action.yml", "action.yaml")
                 if os.path.isfile(os.path.join(root, n))), None)
    if path is None:
        raise WorkflowError(f"action {action}: no action.yml in {root}")
    with open(path) as f:
        spec = yaml.safe_load(f)
    runs = spec.get("runs") or {}
    if runs.get("using") != "composite":
        raise WorkflowError(f"action {action} is not a composite action")
    declared = spec.get("inputs") or {}
    unknown = sorted(set(with_) - set(declared))
    if unknown:
        raise WorkflowError(f"action {action} has no input {', '.join(unknown)}")
    inputs = {k: str(v.get("default", "")) for k, v in declared.items()}
    inputs.update({k: str(v) for k, v in with_.items()})
    for k, d in declared.items():
        if d.get("required") and not inputs.get(k):
            raise WorkflowError(f"action {action}: input {k} is required")
    actx = dict(ctx, inputs=inputs, steps={},
                github=dict(ctx["github"], action_repository=action if action in args.actions else ""))
    outcome = "success"
    for j, step in enumerate(runs.get("steps") or []):
        if "run" not in step:
            raise WorkflowError(f"action {action}: step {j} is not a run step")
        if "shell" not in step:
            raise WorkflowError(f"action {action}: step {j} has no shell (composite steps need one)")
        name = step.get("name") or f"{action} step {j}"
        env = dict(actx["env"])
        env.update({k: substitute(v, actx) for k, v in (step.get("env") or {}).items()})
        outcome, code, outs, _ = script_step(f"{key}-{j}", name, step["run"], step["shell"], env)
        if step.get("id"):
            actx["steps"][step["id"]] = {"outputs": outs, "outcome": outcome}
        if outcome != "success":
            break
    outputs = {k: substitute((v or {}).get("value", ""), actx) for k, v in (spec.get("outputs") or {}).items()}
    return f"composite action {action}: {outcome}", outcome, outputs


def run_job(job_id, job, wf, args, ctx_base, work, artifacts, matrix=None, index=None):
    run_name = job_id if index is None else f"{job_id}-{index}"
    base = os.path.join(work, "jobs", run_name)
    workspace, temp = os.path.join(base, "workspace"), os.path.join(base, "temp")
    os.makedirs(workspace, exist_ok=True)
    os.makedirs(temp, exist_ok=True)
    summary_path = os.path.join(work, f"summary-{run_name}.md")
    open(summary_path, "w").close()
    env_file = os.path.join(base, "github_env")
    path_file = os.path.join(base, "github_path")
    open(env_file, "w").close()
    open(path_file, "w").close()
    ctx = dict(ctx_base, runner={"temp": temp, "os": "Linux", "arch": "X64"}, steps={}, failed=False, env={},
               matrix=matrix or {})
    shell_default = ((wf.get("defaults") or {}).get("run") or {}).get("shell")
    shell_default = ((job.get("defaults") or {}).get("run") or {}).get("shell", shell_default) or "bash"
    wf_env = {k: substitute(v, ctx) for k, v in (wf.get("env") or {}).items()}
    ctx["env"] = dict(wf_env)
    job_env = dict(wf_env)
    job_env.update({k: substitute(v, ctx) for k, v in (job.get("env") or {}).items()})
    extra_env, extra_path = {}, []
    steps_report = []

    def script_step(key, name, script, shell, step_env):
        """Runs one `run:` script as the runner would: its outcome, exit status, outputs, and
        the sizes of the watched files before and after."""
        nonlocal extra_env, extra_path
        if EXPR.search(script):
            raise WorkflowError(f"step {name!r} of job {job_id} has an expression inside its script; pass it through env:")
        if shell not in SHELLS:
            raise WorkflowError(f"shell {shell!r} is not supported by this runner")
        script_path = os.path.join(temp, f"step-{key}.sh")
        with open(script_path, "w") as f:
            f.write(script)
        output_file = os.path.join(base, f"output-{key}")
        step_summary = os.path.join(base, f"summary-{key}.md")
        open(output_file, "w").close()
        open(step_summary, "w").close()
        env = {
            "PATH": os.pathsep.join(list(reversed(extra_path)) + args.path + [os.environ.get("PATH", "/usr/bin:/bin")]),
            "HOME": os.path.join(base, "home"),
            "LANG": "C.UTF-8",
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": workspace,
            "GITHUB_RUN_ID": ctx["github"]["run_id"],
            "GITHUB_JOB": job_id,
            "GITHUB_ENV": env_file,
            "GITHUB_PATH": path_file,
            "GITHUB_OUTPUT": output_file,
            "GITHUB_STEP_SUMMARY": step_summary,
            "RUNNER_TEMP": temp,
            "RUNNER_OS": "Linux",
        }
        os.makedirs(env["HOME"], exist_ok=True)
        env.update({k: str(v) for k, v in step_env.items()})
        cmd = [a.replace("{0}", script_path) for a in SHELLS[shell]]
        print(f"[{job_id}] {name}", file=sys.stderr, flush=True)
        before = watched(args.watch)
        proc = subprocess.run(cmd, cwd=workspace, env=env, stdin=subprocess.DEVNULL)
        outcome = "success" if proc.returncode == 0 else "failure"
        with open(summary_path, "a") as out, open(step_summary) as s:
            out.write(s.read())
        extra_env = read_env_file(env_file)
        extra_path = [p for p in open(path_file).read().split("\n") if p]
        watch = [[b, a] for b, a in zip(before, watched(args.watch))]
        return outcome, proc.returncode, read_env_file(output_file), watch

    for i, step in enumerate(job.get("steps") or []):
        name = step.get("name") or step.get("run", step.get("uses", f"step {i}")).split("\n")[0]
        ctx["env"] = dict(job_env, **extra_env)
        if not condition(step.get("if"), ctx):
            steps_report.append({"name": name, "kind": "run" if "run" in step else "uses", "outcome": "skipped"})
            continue
        step_env = dict(job_env)
        step_env.update(extra_env)
        step_env.update({k: substitute(v, ctx) for k, v in (step.get("env") or {}).items()})
        if "uses" in step:
            uses = step["uses"]
            with_ = {k: substitute(v, ctx) for k, v in (step.get("with") or {}).items()}
            action = uses.split("@")[0]
            outcome = "success"
            try:
                if action == "actions/upload-artifact":
                    note = upload_artifact(with_, workspace, artifacts)
                elif action == "actions/download-artifact":
                    note = download_artifact(with_, workspace, artifacts)
                elif action == "actions/cache/save":
                    note = cache_save(with_, os.path.join(work, "caches"))
                elif action == "actions/cache/restore":
                    note, hit = cache_restore(with_, os.path.join(work, "caches"))
                    if step.get("id"):
                        ctx["steps"][step["id"]] = {"outputs": {"cache-hit": hit}, "outcome": "success"}
                elif action.startswith("./") or action in args.actions:
                    note, outcome, outs = composite(action, with_, ctx, args, script_step, str(i))
                    if step.get("id"):
                        ctx["steps"][step["id"]] = {"outputs": outs, "outcome": outcome}
                else:
                    raise WorkflowError(f"action {uses} is not simulated by this runner")
            except WorkflowError:
                raise
            except OSError as e:
                note, outcome = str(e), "failure"
            print(f"[{job_id}] {name}: {note}", file=sys.stderr)
            steps_report.append({"name": name, "kind": "uses", "uses": uses, "outcome": outcome})
            if outcome != "success":
                ctx["failed"] = True
            continue
        shell = step.get("shell", shell_default)
        outcome, code, outs, watch = script_step(str(i), name, step["run"], shell, step_env)
        steps_report.append({"name": name, "kind": "run", "outcome": outcome, "exit_code": code,
                             "watch": watch})
        if step.get("id"):
            ctx["steps"][step["id"]] = {"outputs": outs, "outcome": outcome}
        if outcome != "success":
            print(f"[{job_id}] {name}: exit {code}", file=sys.stderr)
            ctx["failed"] = True
    outputs = {k: substitute(v, ctx) for k, v in (job.get("outputs") or {}).items()}
    return {"result": "failure" if ctx["failed"] else "success", "outputs": outputs, "steps": steps_report}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workflow")
    p.add_argument("--work", required=True)
    p.add_argument("--input", action="append", default=[])
    p.add_argument("--secret", action="append", default=[])
    p.add_argument("--var", action="append", default=[])
    p.add_argument("--path", action="append", default=[], help="prepended to PATH of every step")
    p.add_argument("--checkout", default=os.getcwd(), help="the repository `uses: ./` actions are read from")
    p.add_argument("--action", action="append", default=[],
                   help="OWNER/NAME=DIR: run `uses: OWNER/NAME@ref` from the composite action in DIR")
    p.add_argument("--watch", action="append", default=[],
                   help="a file (e.g. a registry's log) whose size is recorded before and after each run step")
    args = p.parse_args()
    args.actions = kv(args.action)
    with open(args.workflow) as f:
        wf = yaml.safe_load(f)
    # PyYAML reads the bare key `on` as the boolean True.
    on = wf.get("on", wf.get(True)) or {}
    dispatch = (on.get("workflow_dispatch") or {}) if isinstance(on, dict) else {}
    declared = dispatch.get("inputs") or {}
    inputs = {k: str(v.get("default", "")) for k, v in declared.items()}
    given = kv(args.input)
    for k, v in given.items():
        if k not in declared:
            raise SystemExit(f"input {k} is not declared by the workflow")
        opts = declared[k].get("options")
        if opts and v not in opts:
            raise SystemExit(f"input {k}={v} is not one of {opts}")
        inputs[k] = v
    for k, d in declared.items():
        if d.get("required") and not inputs.get(k):
            raise SystemExit(f"input {k} is required")
    os.makedirs(args.work, exist_ok=True)
    artifacts = os.path.join(args.work, "artifacts")
    os.makedirs(artifacts, exist_ok=True)
    ctx_base = {
        "inputs": inputs,
        "secrets": kv(args.secret),
        "vars": kv(args.var),
        "github": {"run_id": "4242", "event_name": "workflow_dispatch", "repository": "local/runner"},
        "needs": {},
    }
    jobs = wf.get("jobs") or {}
    report = {"ok": True, "jobs": []}
    try:
        for job_id in topo(jobs):
            job = jobs[job_id]
            needs = job.get("needs") or []
            needs = [needs] if isinstance(needs, str) else needs
            ctx = dict(ctx_base, failed=any(ctx_base["needs"][n]["result"] != "success" for n in needs), env={}, steps={},
                       runner={}, matrix={})
            entries = []
            if not condition(job.get("if"), ctx):
                entries.append({"id": job_id, "environment": job.get("environment"), "result": "skipped",
                                "outputs": {}, "steps": []})
            else:
                matrix = (job.get("strategy") or {}).get("matrix")
                runs = [(None, None)] if matrix is None else list(enumerate(combinations(value_of(matrix, ctx)), 1))
                for index, combo in [(i, c) for i, c in runs]:
                    entry = {"id": job_id, "environment": job.get("environment")}
                    if combo is not None:
                        entry["matrix"] = combo
                    if job.get("environment"):
                        print(f"[{job_id}] environment {job['environment']}: approval gate (approved by this runner)",
                              file=sys.stderr)
                    entry.update(run_job(job_id, job, wf, args, ctx_base, args.work, artifacts, combo, index))
                    entries.append(entry)
            result = "failure" if any(e["result"] == "failure" for e in entries) else entries[-1]["result"]
            ctx_base["needs"][job_id] = {"result": result, "outputs": entries[-1]["outputs"]}
            report["jobs"].extend(entries)
            if result == "failure":
                report["ok"] = False
    except WorkflowError as e:
        report["ok"] = False
        report["error"] = str(e)
        print(f"run_workflow: {e}", file=sys.stderr)
    with open(os.path.join(args.work, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
