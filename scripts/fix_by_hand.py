#!/usr/bin/env python3
"""Measure whether the first fix works when pasted by hand, as given: a measuring tool, not a test.

    python scripts/fix_by_hand.py [--exe DTYPE_DOCTOR] [--numerics] SCRIPT.py ...

For each script, in a temporary copy: `dtype-doctor run --json` (retried with `--numerics` when plain
`run` reports no error or warning, as the patterns' scorer does); the first fix with code of the first
error (else warning) finding is taken with the place it states (its `file`/`line`, else the last
`FILE:LINE` its title names); the snippet is pasted there as a user would (a statement assigning what the line
assigns replaces it, `x = x.to(...)` after a line that makes `x` goes after it, anything else goes
before the line, indented like it: the rule of src/dtype_doctor/editing/paste.py, which `run --write`
follows too), and the patched copy is run with plain python: exit 0 is "works".
One line per script, then `fix by hand: W/N`. Exit code is always 0. Standard library only.
"""

from __future__ import annotations

import argparse
import importlib.util
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
# the paste rule is the package's own (editing/paste.py, standard library only), loaded by path so that
# this script measures exactly what `run --write` pastes, without importing the package (or torch)
_RULE = Path(__file__).resolve().parents[1] / "src" / "dtype_doctor" / "editing" / "paste.py"


def _load_rule():
    spec = importlib.util.spec_from_file_location("_paste_rule", _RULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_rule = _load_rule()
paste_all, _code_lines = _rule.paste_all, _rule.code_lines


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
                if _code_lines(fix.get("snippet", "")) and fix.get("language", "python") == "python":
                    return f, fix
    return None


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
            patched = paste_all(copy.read_text(), copy.name, line, snippet)
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
