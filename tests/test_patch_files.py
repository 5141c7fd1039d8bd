"""`run --diff` / `--write` never damage a file, and the diff is one a user can pipe (issue 30 item 2,
issue 32 "the diff on stdout"): each test drives the real CLI on a tiny real script.

- a backup is never overwritten (FILE.orig.1 when FILE.orig exists, and the output says which);
- a symlinked script is written through the link (the link stays a link), a hard link stays linked;
- a script this process may not write is refused (one line, exit 1) unless --force, which keeps it
  read-only; root writes an r--r--r-- one, says so and keeps its mode;
- `run --diff x.py > fix.patch && patch -p1 < fix.patch` works, for a name with a space too;
- a UTF-8-with-BOM + CRLF script and a latin-1 one get a root cause and a diff `patch -p1` applies,
  every byte outside the edit kept;
- a root cause in a second file of the user's (`helper.py`) is patched and verified with the patched
  copy imported;
- the re-run's own "no mixed-precision problem seen" never reaches the user, and a crashed re-run
  "fails" with its exit code and last words;
- on a stderr that is no terminal, one progress line per candidate re-run, none with --quiet.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cli_process import dtype_doctor
from dtype_doctor.cli import main
from dtype_doctor.patching.write import write_files

# an fp16 Linear fed a float32 tensor: the fix makes `x` float16 where it is made
SCRIPT = """\
import torch
from torch import nn

model = nn.Linear(16, 4).half()
x = torch.randn(2, 16)  # float32, the model is float16
with torch.no_grad():
    print("out", model(x).dtype)
"""
FIXED_LINE = "x = torch.randn(2, 16, dtype=torch.float16)  # float32, the model is float16"

needs_patch = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")


def _python(script: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, script], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def _run_here(cwd: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture, *args: str):
    """`dtype-doctor ARGS` in this process from `cwd`: (exit code, stdout, stderr). For the tests whose
    output a fresh interpreter would not change (it still re-runs the patched copy in one)."""
    monkeypatch.chdir(cwd)
    code = main(list(args))
    out, err = capfd.readouterr()
    return code, out, err


def _patched(text: str) -> str:
    return text.replace(SCRIPT.splitlines()[4], FIXED_LINE)


def test_write_goes_through_a_symlink_keeps_hard_links_and_never_overwrites_a_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    real = tmp_path / "src" / "train.py"
    real.parent.mkdir()
    real.write_text(SCRIPT)
    twin = tmp_path / "src" / "train_twin.py"  # a hard link of the real file
    os.link(real, twin)
    link = tmp_path / "train.py"
    link.symlink_to(real)
    users_backup = tmp_path / "train.py.orig"
    users_backup.write_text("the user's own backup\n")
    inode = real.stat().st_ino

    code, _, err = _run_here(tmp_path, monkeypatch, capfd, "run", "--write", "--no-color", "train.py")

    assert code == 0, err[-3000:]
    assert link.is_symlink() and os.readlink(link) == str(real)  # the link stays a link
    assert real.read_text() == _patched(SCRIPT)  # its target is patched
    assert real.stat().st_ino == inode and twin.read_text() == _patched(SCRIPT)  # same inode: still linked
    assert users_backup.read_text() == "the user's own backup\n"  # never overwritten
    assert (tmp_path / "train.py.orig.1").read_text() == SCRIPT
    assert "backup of train.py: train.py.orig.1" in " ".join(err.split())
    # stderr is no terminal here (a CI log): one progress line per candidate re-run
    assert "dtype-doctor run --write: 1/" in err and "patched copy: re-running\n" in err
    assert _python("train.py", tmp_path).stdout == "out torch.float16\n"


def test_write_refuses_a_script_this_process_may_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """Refused when the system says this process may not write it; root, whom mode bits do not stop,
    writes an r--r--r-- script (as `sed -i` does), says so, and keeps its mode."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    script.chmod(0o444)
    code, _, err = _run_here(tmp_path, monkeypatch, capfd, "run", "--write", "--no-color", "train.py")
    said = " ".join(err.split())
    if os.access(script, os.W_OK):  # root
        assert code == 0, said[-3000:]
        assert "train.py is marked read-only: written because this process may write it; mode kept" in said
        assert script.read_text() == _patched(SCRIPT) and stat.S_IMODE(script.stat().st_mode) == 0o444
    else:
        assert code == 1
        assert "not written: train.py is read-only: not written (give --force to write it anyway)" in said
        assert script.read_text() == SCRIPT and not (tmp_path / "train.py.orig").exists()


def test_force_writes_a_read_only_file_in_place_and_keeps_it_read_only(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    script.chmod(0o444)
    inode = script.stat().st_ino
    written = write_files({str(script): SCRIPT}, {str(script): _patched(SCRIPT)}, force=True)
    assert [(w.path, w.backup) for w in written] == [(str(script), f"{script}.orig")]
    assert script.read_text() == _patched(SCRIPT) and script.stat().st_ino == inode
    assert stat.S_IMODE(script.stat().st_mode) == 0o444


@needs_patch
def test_diff_on_stdout_applies_with_patch_to_a_bom_crlf_file_named_with_a_space(tmp_path: Path) -> None:
    name = "my train.py"
    original = b"\xef\xbb\xbf" + SCRIPT.replace("\n", "\r\n").encode()
    (tmp_path / name).write_bytes(original)

    proc = dtype_doctor("run", "--diff", "--no-color", name, cwd=tmp_path, text=False)

    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    assert proc.stdout.startswith(b"--- a/my train.py\t\n+++ b/my train.py\t\n@@ ")  # the diff alone
    assert b"out torch." not in proc.stdout  # the program's own output went to stderr
    (tmp_path / "fix.patch").write_bytes(proc.stdout)
    applied = subprocess.run(
        "patch -p1 < fix.patch", shell=True, cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    expected = b"\xef\xbb\xbf" + _patched(SCRIPT).replace("\n", "\r\n").encode()
    assert (tmp_path / name).read_bytes() == expected  # BOM and CRLF kept outside the edit


# a second file of the user's, in latin-1 with a coding cookie, holds the root cause
HELPER = (
    "# -*- coding: latin-1 -*-\n"
    "import torch\n\n\n"
    "def make_input():\n"
    "    return torch.randn(2, 16)  # entrée en float32, the model is float16\n"
).encode("latin-1")
MAIN = """\
import torch
from torch import nn

from helper import make_input

model = nn.Linear(16, 4).half()
with torch.no_grad():
    print("résultat", model(make_input()).dtype)
"""
HELPER_FIXED = HELPER.replace(b"randn(2, 16)", b"randn(2, 16, dtype=torch.float16)")


@needs_patch
def test_a_root_in_a_second_latin1_file_is_patched_verified_and_applies(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_bytes(HELPER)
    (tmp_path / "main.py").write_text(MAIN)

    proc = dtype_doctor("run", "--diff", "--no-color", "main.py", cwd=tmp_path, text=False)

    err = proc.stderr.decode("utf-8", "replace")
    assert "no root cause lies in" not in err  # the latin-1 file is read as Python reads it
    assert proc.returncode == 0, err[-3000:]
    assert "re-run of the patched copy: exit 0, no dtype error" in err  # the patched helper imported
    assert (tmp_path / "helper.py").read_bytes() == HELPER  # --diff writes nothing
    subprocess.run(["patch", "-p1"], input=proc.stdout, cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "helper.py").read_bytes() == HELPER_FIXED  # the diff's bytes are latin-1
    assert _python("main.py", tmp_path).stdout == "résultat torch.float16\n"


def test_write_keeps_a_latin1_file_in_latin1(tmp_path: Path) -> None:
    helper = tmp_path / "helper.py"
    helper.write_bytes(HELPER)
    text = HELPER.decode("latin-1")
    fixed = HELPER_FIXED.decode("latin-1")
    assert [w.backup for w in write_files({str(helper): text}, {str(helper): fixed})] == [f"{helper}.orig"]
    assert helper.read_bytes() == HELPER_FIXED and Path(f"{helper}.orig").read_bytes() == HELPER


def test_the_re_runs_own_verdict_never_reaches_the_user(tmp_path: Path) -> None:
    """The patched program still fails (not of dtypes): the outcome quotes the program's own output,
    never the re-run's "no mixed-precision problem seen", and the user's run does not end with it."""
    script = SCRIPT + 'raise SystemExit("the data folder is missing")\n'
    (tmp_path / "train.py").write_text(script)
    proc = dtype_doctor("run", "--diff", "--no-color", "train.py", cwd=tmp_path)
    assert proc.returncode == 1
    # a crashed re-run fails, with its exit code and last words, never "0 dtype errors left"
    assert "re-run of the patched copy: fails: exit 1 (the data folder is missing)" in proc.stderr
    assert "dtype errors left" not in proc.stderr
    assert "  the data folder is missing" in proc.stderr  # what the patched program said
    assert "no mixed-precision problem seen" not in proc.stderr


def test_quiet_silences_the_rerun_progress_lines(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = dtype_doctor("run", "--diff", "--quiet", "--no-color", "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert FIXED_LINE in proc.stdout and "re-running" not in proc.stderr


def test_a_big_folder_still_gets_the_scripts_copy_and_its_siblings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the copy limits, the Python files next to the script are copied (the re-run runs the copy
    of the script, whose sibling imports must find the patched copies), nothing else."""
    from dtype_doctor.patching import verify

    user, scratch = tmp_path / "user", tmp_path / "scratch"
    for name in ("main.py", "helper.py", "data.bin", "pkg/deep.py"):
        (user / name).parent.mkdir(parents=True, exist_ok=True)
        (user / name).write_text("x = 1\n")
    scratch.mkdir()
    monkeypatch.setattr(verify, "COPY_LIMIT_FILES", 2)
    placed = verify._copy_small_tree(str(user), str(scratch))
    assert sorted(os.path.relpath(p, scratch) for p in placed.values()) == ["helper.py", "main.py"]
