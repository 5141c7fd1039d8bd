#!/usr/bin/env python3
"""Measure whether the first fix works when applied as the report gives it: a measuring tool, not a test.

    python scripts/fix_by_hand.py [--exe DTYPE_DOCTOR] [--numerics] SCRIPT.py ...

For each script, in a temporary copy: `dtype-doctor run --json` (retried with `--numerics` when plain
`run` reports no error or warning, as the patterns' scorer does); the first fix of the first error
(else warning) finding is taken as it is: its `edits`, in ruff's shape (the text from `location` up to,
not including, `end_location` replaced by `content`; rows and columns 1-based, columns in characters).
They are applied here by this file's own few lines (nothing of the package is imported), and the
patched copy is run with plain python: exit 0 is "works". A first fix without edits is advice: it
does not work by hand. Then, with `--write-too`, `run --write` on a second copy must write exactly
the same files. One line per script, then `fix by hand: W/N`. Exit code is always 0. Standard
library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TIMEOUT = 600


def _run(cmd: list[str], cwd: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, env=env)


def _report(exe: str, script: str, cwd: str, flags: list[str]) -> list[dict]:
    out = os.path.join(cwd, "fbh.json")
    if os.path.exists(out):
        os.remove(out)
    _run([exe, "run", *flags, "--json", out, script], cwd)
    try:
        with open(out, encoding="utf-8") as fh:
            return json.load(fh)["findings"]
    except (OSError, ValueError, KeyError):
        return []


def first_fix(findings: list[dict]) -> tuple[dict, dict] | None:
    """(finding, its first fix) of the first error finding, else of the first warning."""
    for severity in ("error", "warning"):
        for f in findings:
            if f.get("severity") == severity and f.get("fixes"):
                return f, f["fixes"][0]
    return None


def _offset(text: str, row: int, column: int) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(line) for line in lines[: row - 1]) + column - 1


def apply_edits(root: Path, edits: list[dict]) -> list[Path]:
    """Apply ruff-shaped edits to the files under `root` they name (by file name); the files written."""
    by_file: dict[str, list[dict]] = {}
    for e in edits:
        by_file.setdefault(Path(e["filename"]).name, []).append(e)
    written = []
    for name, mine in by_file.items():
        path = root / name
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
        spans = sorted(
            (
                (
                    _offset(text, e["location"]["row"], e["location"]["column"]),
                    _offset(text, e["end_location"]["row"], e["end_location"]["column"]),
                    e["content"],
                )
                for e in mine
            ),
            reverse=True,
        )
        for start, end, content in spans:
            text = text[:start] + content + text[end:]
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        written.append(path)
    return written


def judge(exe: str, script: Path, numerics: bool, write_too: bool) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / script.name
        shutil.copy(script, copy)
        flags = ["--numerics"] if numerics else []
        findings = _report(exe, copy.name, tmp, flags)
        if not numerics and not any(f.get("severity") in ("error", "warning") for f in findings):
            flags = ["--numerics"]
            findings = _report(exe, copy.name, tmp, flags)
        picked = first_fix(findings)
        if picked is None:
            return False, "no fix"
        finding, fix = picked
        if not fix.get("edits"):
            return False, f"[{finding['code']}] advice, no edits: {fix.get('title', '')!r}"
        original = copy.read_text(encoding="utf-8")
        try:
            apply_edits(Path(tmp), fix["edits"])
        except (OSError, KeyError, ValueError) as exc:
            return False, f"cannot apply: {exc}"
        patched = copy.read_text(encoding="utf-8")
        res = _run([sys.executable, copy.name], tmp)
        tail = (res.stderr.strip().splitlines() or [""])[-1]
        what = f"[{finding['code']}] {fix.get('title', '')[:90]!r} ({fix.get('verification', '')[:60]})"
        same = ""
        if write_too:
            copy.write_text(original, encoding="utf-8")
            _run([exe, "run", *flags, "--write", "--no-backup", copy.name], tmp)
            same = (
                " ; --write wrote the same"
                if copy.read_text(encoding="utf-8") == patched
                else " ; --write DIFFERS"
            )
        return res.returncode == 0, what + ("" if res.returncode == 0 else f" -> {tail[:160]}") + same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scripts", nargs="+", type=Path)
    ap.add_argument("--exe", default=os.environ.get("DTYPE_DOCTOR", "dtype-doctor"))
    ap.add_argument("--numerics", action="store_true")
    ap.add_argument("--write-too", action="store_true", help="also check that run --write writes the same")
    args = ap.parse_args()
    works = 0
    for script in args.scripts:
        ok, what = judge(args.exe, script.resolve(), args.numerics, args.write_too)
        works += ok
        print(f"{script.stem}: {'works' if ok else 'FAILS'}  {what}", flush=True)
    print(f"fix by hand: {works}/{len(args.scripts)}")


if __name__ == "__main__":
    main()
