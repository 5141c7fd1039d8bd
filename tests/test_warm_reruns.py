"""Warm re-runs (verifying/warm.py): a re-run forked from the zygote is the program run by a fresh
`python -c` in the same place: same exit code, output, working directory, environment, arguments,
empty standard input, its threads joined and atexit handlers run at the end, the guard installed;
one past its timeout is killed; with the zygote off the re-run starts cold, with the same answer."""

from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest

from dtype_doctor.verifying import rerun, warm

PROGRAM = textwrap.dedent(
    """
    import atexit, os, sys, threading, time
    atexit.register(lambda: print("atexit ran", flush=True))
    def late():
        time.sleep(0.2)
        print("thread joined", flush=True)
    threading.Thread(target=late).start()
    print("cwd", os.path.basename(os.getcwd()))
    print("argv", sys.argv[1:])
    print("env", os.environ.get("WARM_PROBE"))
    print("stdin", os.path.samestat(os.fstat(0), os.stat(os.devnull)))
    print("to stderr", file=sys.stderr)
    if "--fail" in sys.argv:
        raise SystemExit("failed on purpose")
    if "--write" in sys.argv:
        open(os.path.join(os.path.expanduser("~"), "warm-probe.txt"), "w").write("x")
    if "--sleep" in sys.argv:
        time.sleep(60)
    """
)


def _rerun(tmp_path, *args: str, timeout: float = 120) -> rerun.Ran:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    (scratch / "prog.py").write_text(PROGRAM)
    env = {**os.environ, "WARM_PROBE": "probe", "PYTHONPATH": str(scratch)}
    cmd = [sys.executable, "-m", "prog", *args]
    return rerun.run(cmd, str(scratch), str(scratch), env, timeout)


def _forks(monkeypatch) -> list:
    served = []
    real = warm.Zygote.run

    def counting(self, *a, **k):
        out = real(self, *a, **k)
        served.append(out is not None)
        return out

    monkeypatch.setattr(warm.Zygote, "run", counting)
    return served


@pytest.mark.parametrize("args", [("a", "b c"), ("--fail",)])
def test_a_warm_rerun_answers_as_a_cold_one(tmp_path, monkeypatch, args):
    served = _forks(monkeypatch)
    hot = _rerun(tmp_path, *args)
    assert served == [True]
    monkeypatch.setenv("DTYPE_DOCTOR_COLD_RERUNS", "1")
    cold = _rerun(tmp_path, *args)
    assert served == [True]  # the second started cold
    assert (hot.code, hot.stdout, hot.stderr) == (cold.code, cold.stdout, cold.stderr)
    assert hot.code == (1 if "--fail" in args else 0)
    assert f"argv {list(args)}" in hot.stdout and "env probe" in hot.stdout and "stdin True" in hot.stdout
    assert "cwd scratch" in hot.stdout and "to stderr" in hot.stderr
    assert hot.stdout.rstrip().endswith("thread joined\natexit ran")
    if "--fail" in args:
        assert "failed on purpose" in hot.stderr


def test_a_warm_rerun_is_guarded_and_killed_past_its_timeout(tmp_path, monkeypatch):
    served = _forks(monkeypatch)
    stopped = _rerun(tmp_path, "--write")
    assert stopped.stopped == "the call writes files" and stopped.code != 0
    assert not os.path.exists(os.path.join(os.path.expanduser("~"), "warm-probe.txt"))
    started = time.perf_counter()
    slow = _rerun(tmp_path, "--sleep", timeout=3)
    assert slow.code == 124 and time.perf_counter() - started < 40
    assert served == [True, True]


def test_the_zygote_preloads_libraries_never_the_users_files(tmp_path, monkeypatch):
    monkeypatch.setattr(warm, "_held_before", set())  # as before any program started here
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "users_module_xyz.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(mine))
    try:
        import users_module_xyz  # noqa: F401

        names = warm.preloadable(str(mine), str(tmp_path / "scratch"))
    finally:
        sys.path.remove(str(mine))
        sys.modules.pop("users_module_xyz", None)
    assert "users_module_xyz" not in names
    assert "json" in names and "dtype_doctor.verifying.warm" in names


def test_what_the_process_held_before_the_program_is_not_the_programs(monkeypatch):
    # a host's own modules (a notebook's, a test runner's warm process) are not imported for the
    # program's re-runs; torch, NumPy and the tool are, whoever imported them first
    import colorsys  # noqa: F401 (a library module this test process holds)

    import torch  # noqa: F401

    monkeypatch.setattr(warm, "_held_before", set())
    assert "colorsys" in warm.preloadable("/nonexistent-anchor", "/nonexistent-scratch")
    warm.program_starts()
    names = warm.preloadable("/nonexistent-anchor", "/nonexistent-scratch")
    assert "colorsys" not in names and "torch" in names and "dtype_doctor.verifying.warm" in names


def test_programs_that_end_at_once_are_answered_one_after_another_with_their_codes(tmp_path, monkeypatch):
    # five re-runs from one zygote, each ending before its first line is done: each answer is its own
    # (the pid and status lines are read unbuffered, so a status already in the pipe is never missed)
    served = _forks(monkeypatch)
    scratch = tmp_path / "quick"
    scratch.mkdir()
    (scratch / "quick.py").write_text("raise SystemExit(3)\n")
    env = {**os.environ, "PYTHONPATH": str(scratch)}
    for _ in range(5):
        started = time.perf_counter()
        ran = rerun.run([sys.executable, "-m", "quick"], str(scratch), str(scratch), env, 20)
        assert ran.code == 3 and time.perf_counter() - started < 15
    assert served == [True] * 5


PREFORK = """
import atexit, os, sys
from dtype_doctor.verifying import warm
atexit.register(lambda: print("parent atexit", flush=True))
warm.prefork()
assert not warm._preforked  # an API call inside a host: never forked
warm.process_is_the_command()
warm.prefork()
print("forked", bool(warm._preforked))
try:
    os.waitpid(-1, os.WNOHANG)
    print("a child")
except ChildProcessError:
    print("no child")
here = os.getcwd()
z = warm.zygote(here, os.path.join(here, "scratch"), dict(os.environ))
code = "import sys; print(6 * 7); print('e', file=sys.stderr); raise SystemExit(3)"
status, out, err = z.run([sys.executable, "-c", code], here, dict(os.environ), 60)
print(status, out.strip(), err.strip())
"""


def test_the_zygote_forked_before_the_program_serves_and_is_no_child_of_it(tmp_path):
    # `run` forks its re-runs' zygote before the user's program starts: a grandchild in a session
    # of its own (the program's os.wait() finds no child of ours), which runs no handler of the
    # parent's at its end and answers as a fresh zygote does
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(warm.__file__).rsplit("/dtype_doctor/", 1)[0]}
    env.pop(warm._ENV_OFF, None)
    done = subprocess.run(
        [sys.executable, "-c", PREFORK], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["forked True", "no child", "3 42 e", "parent atexit"]
