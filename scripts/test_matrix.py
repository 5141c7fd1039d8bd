"""`make test-matrix`: the run/watch/warnings/check/explain tests on every Python dtype-doctor supports.

For each version, a venv under .matrix/ (git-ignored) gets torch first, pinned (TORCH), then
dtype-doctor's requirements with the `models` and `dev` extras under constraints.txt (where its pins
do not install on that Python, numpy's on 3.10, the newest versions for it); the tests run with this
checkout's src/ first on the path. MATRIX_VENVS=DIR keeps the venvs elsewhere. The interpreter comes from pyenv (`pyenv prefix X`) or `pythonX`
on PATH. Prints passed/failed/skipped per version; exits 1 if any version failed or could not be set up.

    python3 scripts/test_matrix.py [--versions 3.10 3.12 3.13] [--tests FILE...] [-k EXPR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATRIX = Path(os.environ.get("MATRIX_VENVS", ROOT / ".matrix"))  # where the venvs live
TORCH = "torch==2.13.0"
VERSIONS = ("3.10", "3.12", "3.13")
# run (as python), watch, torch's warnings, check, explain, verification's isolation and file writes:
# the parts that touch the interpreter
TESTS = (
    "tests/test_run.py",
    "tests/test_run_like_python.py",
    "tests/test_run_is_python.py",
    "tests/test_origins_in_run.py",
    "tests/test_watch_ops.py",
    "tests/test_watch_safety.py",
    "tests/test_check.py",
    "tests/test_explain_cli.py",
    "tests/test_explain_torch.py",
    "tests/test_demo.py",
    "tests/test_autocast_table.py",
    "tests/test_verify_isolation.py",
    "tests/test_patch_files.py",
)


def interpreter(version: str) -> str | None:
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        found = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True)
        for prefix in found.stdout.split(":"):
            candidate = Path(prefix.strip()) / "bin" / "python"
            if found.returncode == 0 and candidate.exists():
                return str(candidate)
    return shutil.which(f"python{version}")


def venv(version: str, python: str) -> Path:
    """The version's venv, built once (a stamp file marks a finished install)."""
    where = MATRIX / f"py{version.replace('.', '')}"
    stamp = where / ".installed"
    if stamp.exists():
        return where
    subprocess.run([python, "-m", "venv", "--clear", str(where)], check=True)
    pip = [str(where / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH], check=True)  # first: nothing else may pick another torch
    # the tests import this checkout's src/ (PYTHONPATH), so only the requirements are installed: the
    # matrix tries versions beyond what requires-python declares, which is how it is found out
    needs = requirements()
    try:
        subprocess.run([*pip, "-c", str(ROOT / "constraints.txt"), *needs], check=True)
    except subprocess.CalledProcessError:
        print(f"Python {version}: constraints.txt's pins do not install; the newest versions for it instead")
        subprocess.run([*pip, *needs], check=True)
    stamp.touch()
    return where


def requirements() -> list[str]:
    """pyproject.toml's dependencies with the `models` and `dev` extras (what the tests import)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [*project["dependencies"], *extras["models"], *extras["dev"]]


def run_tests(where: Path, tests: list[str], keyword: str | None) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [str(where / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    if keyword:
        cmd += ["-k", keyword]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    sys.stdout.write(done.stdout[-3000:])
    summary = re.findall(r"^(\d+ (?:passed|failed|skipped|error).*?) in [\d.]+s", done.stdout, re.M)
    return done.returncode, summary[-1] if summary else f"pytest exited {done.returncode}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", default=list(VERSIONS))
    parser.add_argument("--tests", nargs="+", default=list(TESTS))
    parser.add_argument("-k", dest="keyword")
    args = parser.parse_args(argv)
    results = {}
    for version in args.versions:
        python = interpreter(version)
        if python is None:
            results[version] = (1, "no interpreter (pyenv install, or pythonX.Y on PATH)")
            continue
        try:
            where = venv(version, python)
        except subprocess.CalledProcessError as exc:
            results[version] = (1, f"venv not built: {exc}")
            continue
        print(f"== Python {version}: {' '.join(args.tests)}", flush=True)
        results[version] = run_tests(where, args.tests, args.keyword)
    print("\ntest-matrix:")
    for version, (code, summary) in results.items():
        print(f"  Python {version}  {'ok    ' if code == 0 else 'FAILED'}  {summary}")
    return 0 if all(code == 0 for code, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
