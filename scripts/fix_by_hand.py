#!/usr/bin/env python3
"""Measure whether the first fix works when pasted by hand, as given: a measuring tool, not a test.

    python scripts/fix_by_hand.py [--exe DTYPE_DOCTOR] [--numerics] SCRIPT.py ...

For each script, in a temporary copy: `dtype-doctor run --json` (retried with `--numerics` when plain
`run` reports no error or warning, as the patterns' scorer does); the first fix with code of the first
error (else warning) finding is taken with the place it states (its `file`/`line`, else the last
`FILE:LINE` its title names); the snippet is pasted there as a user would (a statement assigning
what the line assigns replaces it, except a cast of it, `x = x.to(...)`, which goes after the line;
a bare call of the function the line calls replaces it; anything else goes before the line,
indented like it), and the patched copy is run with plain python: exit 0 is "works".
One line per script, then `fix by hand: W/N`. Exit code is always 0. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TIMEOUT = 300
_PLACE = re.compile(r"([\w./-]+\.py):(\d+)")


def _run(cmd: list[str], cwd: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, env=env)


def _report(exe: str, script: str, cwd: str, flags: list[str]) -> list[dict]:
    out = os.path.join(cwd, "fbh.json")
    if os.path.exists(out):
        os.remove(out)
    _run([exe, "run", *flags, "--json", out, script], cwd)
    try:
        return json.load(open(out))["findings"]
    except (OSError, ValueError, KeyError):
        return []


def first_fix(findings: list[dict]) -> tuple[dict, dict] | None:
    """(finding, fix): the first fix with code of the first error finding, else of the first warning."""
    for severity in ("error", "warning"):
        for f in findings:
            if f.get("severity") != severity:
                continue
            for fix in f.get("fixes", []):
                code = [ln for ln in fix.get("snippet", "").splitlines() if ln.split("#")[0].strip()]
                if code and fix.get("language", "python") == "python":
                    return f, fix
    return None


def _targets(stmt: ast.stmt) -> set[str]:
    out: set[str] = set()
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    for t in targets:
        if t is not None:
            out.add(ast.unparse(t))
    return out


_CASTS = {"to", "float", "double", "half", "bfloat16", "type"}


def _recasts(stmt: ast.stmt) -> bool:
    """`x = x.to(...)` (`x.float()`, ...): the snippet casts what the line made, so it goes after it;
    any other assignment to the line's target (`s = e if s is None else s.float() + e`) is the line
    rewritten, read as "instead of it"."""
    value = getattr(stmt, "value", None)
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _CASTS:
        value = value.func.value
        if isinstance(value, ast.Attribute) and value.attr == "data":
            value = value.value
    return value is not getattr(stmt, "value", None) and bool(_targets(stmt) & {ast.unparse(value)})


def _same_call(new: ast.stmt, old: ast.stmt | None) -> bool:
    """Both statements are a bare call of the same function (`f(n, dtype=torch.float32)` for
    `f(n, dtype=torch.get_default_dtype())`): the snippet is the line rewritten."""
    calls = [s.value for s in (new, old) if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)]
    return len(calls) == 2 and ast.unparse(calls[0].func) == ast.unparse(calls[1].func)


def paste(text: str, line: int, snippet: str) -> str:
    """`text` with `snippet` pasted at `line` (1-based) the way a user reads "at FILE:LINE"."""
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    around = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.stmt) and n.lineno <= line <= (n.end_lineno or n.lineno)
    ]
    stmt = min(around, key=lambda n: (n.end_lineno or n.lineno) - n.lineno) if around else None
    first = ast.parse(snippet).body[0]
    at = stmt.lineno if stmt is not None else line
    indent = re.match(r"\s*", lines[at - 1]).group(0)
    body = "".join(indent + ln + "\n" for ln in snippet.splitlines())
    end = (stmt.end_lineno or at) if stmt is not None else at
    if (
        stmt is not None
        and isinstance(stmt, (ast.Assign, ast.AnnAssign))
        and _targets(first) & _targets(stmt)
    ):
        if _recasts(first):  # x = x.to(...): after the line that made x
            return "".join([*lines[:end], body, *lines[end:]])
        return "".join([*lines[: at - 1], body, *lines[end:]])  # the line rewritten: instead of it
    if _same_call(first, stmt):  # the line's call with other arguments: instead of it
        return "".join([*lines[: at - 1], body, *lines[end:]])
    registers = isinstance(first, ast.Expr) and "register_" in ast.unparse(first)
    if registers and stmt is not None and isinstance(stmt, ast.Assign):
        return "".join([*lines[: at - 1], body, *lines[end:]])
    return "".join([*lines[: at - 1], body, *lines[at - 1 :]])


def judge(exe: str, script: Path, numerics: bool) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / script.name
        shutil.copy(script, copy)
        flags = ["--numerics"] if numerics else []
        findings = _report(exe, copy.name, tmp, flags)
        if not numerics and not any(f.get("severity") in ("error", "warning") for f in findings):
            findings = _report(exe, copy.name, tmp, ["--numerics"])
        picked = first_fix(findings)
        if picked is None:
            return False, "no fix with code"
        finding, fix = picked
        places = [(Path(p).name, int(n)) for p, n in _PLACE.findall(fix.get("title", ""))]
        if fix.get("file") and fix.get("line"):  # the place the fix carries, where it has one
            places.append((Path(fix["file"]).name, int(fix["line"])))
        places = [(p, n) for p, n in places if p == script.name]
        snippet = fix["snippet"]
        if not places:
            return False, f"no place stated: {fix['title']!r} {snippet!r}"
        line = places[-1][1]
        try:
            patched = paste(copy.read_text(), line, snippet)
        except (SyntaxError, IndexError) as exc:
            return False, f"cannot paste at :{line}: {exc} {snippet!r}"
        copy.write_text(patched)
        res = _run([sys.executable, copy.name], tmp)
        tail = (res.stderr.strip().splitlines() or [""])[-1]
        what = f"[{finding['code']}] :{line} {snippet!r}"
        return res.returncode == 0, what + ("" if res.returncode == 0 else f" -> {tail[:160]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scripts", nargs="+", type=Path)
    ap.add_argument("--exe", default=os.environ.get("DTYPE_DOCTOR", "dtype-doctor"))
    ap.add_argument("--numerics", action="store_true")
    args = ap.parse_args()
    works = 0
    for script in args.scripts:
        ok, what = judge(args.exe, script.resolve(), args.numerics)
        works += ok
        print(f"{script.stem}: {'works' if ok else 'FAILS'}  {what}", flush=True)
    print(f"fix by hand: {works}/{len(args.scripts)}")


if __name__ == "__main__":
    main()
