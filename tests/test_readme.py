"""Every command the README shows runs as written from a fresh checkout (issue 20).

The tree is the committed files only (`git ls-files`, as a clone has them) copied to a temporary
directory; each README command block runs there in bash, in README order, with `dtype-doctor` being
this checkout's CLI. A command may report problems (exit 1) but never fail as a command (exit 2:
bad usage, a missing file; or worse). Blocks that install packages or build the venv (`pip`, `make`)
are skipped; `$ ` lines of output blocks and the examples of the commands table run too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"^\s*(pip|make)\b", re.M)


def _lines(body: str) -> list[str]:
    """The commands of a block, a trailing backslash joining a line to the next."""
    return [line for line in body.replace("\\\n", " ").splitlines() if line.strip()]


def _blocks() -> list[tuple[str, list[str]]]:
    """(where, commands) per block, in README order; the table's examples last (merge reads the
    rank reports its block makes)."""
    out = []
    for m in FENCE.finditer(README):
        lang, body = m.group(1), m.group(2)
        where = f"README.md:{README[: m.start()].count(chr(10)) + 1}"
        if lang in ("bash", "sh", "shell") and not SKIP.search(body):
            out.append((where, _lines(body)))
        elif not lang and body.startswith("$ "):
            out.append((where, [body.splitlines()[0][2:]]))
    table = re.findall(r"^\| `\w+` \|.*\| `(dtype-doctor [^`]+)` \|$", README, re.M)
    out.append(("README.md commands table", table))
    return out


BLOCKS = _blocks()


def test_the_readme_has_the_commands_this_test_runs():
    commands = [c for _, block in BLOCKS for c in block]
    assert any(c.startswith("dtype-doctor run --json report.json demo_run.py") for c in commands)
    assert len([c for c in commands if c.startswith("dtype-doctor ")]) >= 25


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to know which files a clone has")
    files = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    dest = tmp_path_factory.mktemp("clone")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _run(checkout: Path, commands: list[str]) -> list[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout / "src"),
        "OMP_NUM_THREADS": "1",
        "COLUMNS": "100",
        "DTYPE_DOCTOR_PY": sys.executable,
    }
    prelude = 'dtype-doctor() { "$DTYPE_DOCTOR_PY" -m dtype_doctor "$@"; }\n'
    failures = []
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", prelude + command],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode > 1:
            failures.append(f"{command}\n  exit {done.returncode}: {done.stderr.strip()[-400:]}")
    return failures


@pytest.mark.slow  # ~25 fresh interpreters importing torch: two at a time, 1-2 min on a loaded machine
def test_every_readme_command_runs_from_a_fresh_checkout(checkout):
    seen: set[str] = set()
    phases: list[list[list[str]]] = [
        [],
        [],
    ]  # the blocks (each in order, blocks side by side), then the table
    for where, commands in BLOCKS:
        fresh = [c for c in commands if c not in seen]
        seen.update(commands)
        phases[where.endswith("table")].append(fresh)
    failures = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for blocks in phases:
            failures += [f for found in pool.map(lambda block: _run(checkout, block), blocks) for f in found]
    assert not failures, "\n".join(failures)
