"""Every command the README shows runs as written from a fresh checkout (issue 20), and leaves
nothing in it that git would show (issue 32).

The tree is the committed files only (`git ls-files`, as a clone has them) copied to a temporary
directory and committed there; each README command block runs there in bash, in README order, with
`dtype-doctor` being this checkout's CLI. A command may report problems (exit 1) but never fail as a command (exit 2:
bad usage, a missing file; or worse). Blocks that install packages or build the venv (`pip`, `make`)
are skipped; `$ ` lines of output blocks and the examples of the commands table run too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import readme_samples
from cli_process import serve_commands

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
    assert any(c.startswith("dtype-doctor run --json out/report.json demo_run.py") for c in commands)
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
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", "clone"]):
        subprocess.run(["git", *GIT_IDENTITY, *command], cwd=dest, capture_output=True, check=True)
    return dest


GIT_IDENTITY = (
    "-c",
    "user.name=readme",
    "-c",
    "user.email=readme@example.invalid",
    "-c",
    "commit.gpgsign=false",
)


def left_in(checkout: Path) -> list[str]:
    """What git shows as new or changed in `checkout` (`git status --porcelain`, every untracked file)."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    )
    return status.stdout.splitlines()


WIDTH = 80  # COLUMNS for every command: no line of the tool's output may be wider (issue 32)
_TRACEBACK_END = re.compile(r"^(\w+\.)*\w*(Error|Exception|Interrupt|Exit)\b|^\w+Warning\b")


# what a library's own logger prints while the tool runs the user's model: the user sees it as without
# the tool (diffusers' `.to()` note in compare)
_LIBRARY_LOG = re.compile(r"^There are modules in \w+ that should be kept in float32")


def too_wide(output: str, width: int = WIDTH) -> list[str]:
    """The lines of a command's output wider than `width` terminal cells, leaving out what is not
    the tool's to wrap: a Python traceback of the user's program (up to its exception line), the
    body of a unified diff (a patch must stay byte-exact), a JSON document (machine output: a
    reader parses it, a terminal does not lay it out) and a library's own log line."""
    from rich.cells import cell_len

    try:
        json.loads(output)
        return []
    except ValueError:
        pass
    wide, in_traceback, in_diff = [], False, False
    for line in output.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            in_traceback = True
        elif in_traceback and _TRACEBACK_END.match(line):
            in_traceback = False
            continue
        if line.startswith("--- ") or line.startswith("+++ ") or line.startswith("@@ "):
            in_diff = True
        elif in_diff and line[:1] not in ("+", "-", " ", "\\"):
            in_diff = False
        if not (in_traceback or in_diff or _LIBRARY_LOG.match(line)) and cell_len(line) > width:
            wide.append(line)
    return wide


def test_the_width_check_leaves_out_tracebacks_and_diffs_only():
    long = "x" * 90
    output = "\n".join(
        [
            "Traceback (most recent call last):",
            f'  File "{long}", line 1',
            "RuntimeError: mat1 and mat2",
            f"dtype-doctor [matmul-dtype-mismatch] {long}",
            "--- a.py",
            "+++ a.py",
            "@@ -1 +1 @@",
            f"-{long}",
            f"+{long}",
            f"│ {long}",
        ]
    )
    assert too_wide(output) == [f"dtype-doctor [matmul-dtype-mismatch] {long}", f"│ {long}"]


def _run(checkout: Path, commands: list[str], server: str | None = None) -> list[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout / "src"),
        "OMP_NUM_THREADS": "1",
        "COLUMNS": str(WIDTH),
        "DTYPE_DOCTOR_PY": sys.executable,
        "DTYPE_DOCTOR_SRC": str(checkout / "src"),
        "DTYPE_DOCTOR_CLIENT": str(ROOT / "tests" / "zygote_client.py"),
    }
    if server:  # each command forked from this worker's warm zygote (tests/zygote_client.py)
        env["DTYPE_DOCTOR_TEST_SERVER"] = server
    # this checkout's package first, before any PYTHONPATH a command sets itself
    prelude = (
        'dtype-doctor() { PYTHONPATH="$DTYPE_DOCTOR_SRC${PYTHONPATH:+:$PYTHONPATH}" '
        '"$DTYPE_DOCTOR_PY" "$DTYPE_DOCTOR_CLIENT" "$@"; }\n'
    )
    failures = []
    for command in commands:
        sample = command in SAMPLES  # its output is compared with the README's: both streams, in order
        done = subprocess.run(
            ["bash", "-c", prelude + (f"{{ {command}\n}} 2>&1" if sample else command)],
            cwd=checkout,
            # a sample's output is what a fresh shell prints: cold, as the user runs it
            env={k: v for k, v in env.items() if k != "DTYPE_DOCTOR_TEST_SERVER"} if sample else env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
        )
        # a script that cannot import its own modules fails as written, whatever run's exit code
        if done.returncode > 1 or "ModuleNotFoundError" in done.stderr:
            failures.append(f"{command}\n  exit {done.returncode}: {done.stderr.strip()[-400:]}")
        for stream, text in (("stdout", done.stdout), ("stderr", done.stderr)):
            failures += [
                f"{command}\n  {stream} line wider than {WIDTH}: {line!r}" for line in too_wide(text)
            ]
        if sample:
            OUTPUTS[command] = done.stdout
    return failures


SAMPLES = readme_samples.samples(README)
OUTPUTS: dict[str, str] = {}  # a sample's command -> what it printed in the checkout


def _bare(command: str) -> str:
    """The command without its trailing `# comment`."""
    return re.sub(r"\s+#\s.*$", "", command)


@pytest.mark.slow  # ~25 fresh interpreters importing torch: two at a time, 1-2 min on a loaded machine
def test_every_readme_command_runs_from_a_fresh_checkout(checkout):
    seen: set[str] = set()
    phases: list[list[list[str]]] = [
        [],
        [],
    ]  # the blocks (each in order, blocks side by side), then the table
    for where, commands in BLOCKS:  # a command shown twice (a comment aside) runs once
        fresh = [c for c in commands if _bare(c) not in seen]
        seen.update(map(_bare, commands))
        if where.endswith("table"):  # each row an example of its own: side by side too
            phases[1] += [[c] for c in fresh]
        else:
            phases[0].append(fresh)
    failures = []
    where = tempfile.mkdtemp(prefix="dd-readme-")
    stop = serve_commands(os.path.join(where, "zygote.sock"))
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for blocks in phases:
                ran = pool.map(
                    lambda block: _run(checkout, block, os.path.join(where, "zygote.sock")), blocks
                )
                failures += [f for found in ran for f in found]
    finally:
        stop()
        shutil.rmtree(where, ignore_errors=True)
    failures += [f"left in the checkout: {line}" for line in left_in(checkout)]
    if os.environ.get("DTYPE_DOCTOR_WRITE_SAMPLES"):
        (ROOT / "README.md").write_text(
            readme_samples.rewrite(README, OUTPUTS, str(checkout)), encoding="utf-8"
        )
    else:
        failures += [
            f"the README's sample of `{command}` is not what it prints now (rewrite: see tests/readme_samples.py)"
            f":\n{OUTPUTS.get(command, '(not run)')[-3000:]}"
            for command, body in SAMPLES.items()
            if not readme_samples.matches(body, OUTPUTS.get(command, ""), str(checkout))
        ]
    assert not failures, "\n".join(failures)


PACKAGE = ROOT / "src" / "dtype_doctor"


def _tree_entries(readme: str) -> dict[str, str]:
    """The README's source tree: {first column: the entry's whole text}, an entry being a line
    indented two spaces and the deeper lines after it."""
    tree = next((body for _, body in FENCE.findall(readme) if body.startswith("src/dtype_doctor/")), None)
    assert tree, "the README has no source tree block starting with src/dtype_doctor/"
    entries: dict[str, str] = {}
    key = ""
    for line in tree.splitlines()[1:]:
        if re.match(r"  \S", line):
            key = line.split("  ")[1].strip()
            entries[key] = line
        elif key:
            entries[key] += "\n" + line
    return entries


def _unnamed_modules(readme: str) -> list[str]:
    """Modules under src/dtype_doctor that the tree does not name: a top-level module in an entry's
    first column, a package's module as `name.py` in its package's entry (a subpackage named there
    as `sub/` with its modules)."""
    entries = _tree_entries(readme)
    first_columns = {name.strip() for key in entries for name in key.split(",")}
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) == 1:
            if parts[0] not in first_columns:
                missing.append(parts[0])
            continue
        entry = entries.get(f"{parts[0]}/", "")
        needed = [f"{part}/" for part in parts[1:-1]] + ([] if parts[-1] == "__init__.py" else [parts[-1]])
        if not entry or any(not re.search(rf"(?<![\w/]){re.escape(n)}", entry) for n in needed):
            missing.append("/".join(parts))
    return missing


def test_the_readme_source_tree_names_every_module():
    missing = _unnamed_modules(README)
    assert not missing, f"the README's source tree does not name: {missing}"


def test_the_source_tree_check_bites():
    readme = "```\nsrc/dtype_doctor/\n  cli.py           the CLI\n  render/          console.py\n```\n"
    missing = _unnamed_modules(readme)
    assert "cli.py" not in missing and "render/console.py" not in missing
    assert "render/html.py" in missing and "report.py" in missing and "patching/plan.py" in missing


def test_the_install_block_pins_versions_and_names_chromium():
    install = README[README.index("## Install") :]
    block = FENCE.search(install).group(2)
    pips = [line for line in block.splitlines() if re.match(r"pip install -e\b|pip install .*-e ", line)]
    assert pips and all("-c constraints.txt" in line for line in pips), pips
    assert "scripts/install-chromium.sh" in block
    assert (ROOT / "scripts" / "install-chromium.sh").is_file()
