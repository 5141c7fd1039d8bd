"""Issue 42 (first, do no harm, round 5): exits, pipes, odd names and schema truth, through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_process import ENV

MISMATCH_FACTORY = """
import torch

def build():
    return torch.nn.Sequential(torch.nn.Linear(4, 4).half(), torch.nn.Linear(4, 4))
"""


def _script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def _reader_gone(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run with stdout a pipe whose reader closed before the first write (`... | true`): exit code, stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=cwd)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(timeout=300), err


# H15: the reader of stdout closing early keeps the exit status (as python keeps the script's own)
@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["run", "--json", "quits.py"], 3),
        (["run", "-o", "sarif", "quits.py"], 3),
        (["check", "model.py:build", "--input", "2x4"], 1),
        (["check", "--json", "model.py:build", "--input", "2x4"], 1),
    ],
    ids=["run-json", "run-sarif", "check", "check-json"],
)
def test_a_closed_stdout_keeps_the_exit_status(tmp_path, argv, want):
    _script(tmp_path, "quits.py", "import sys\nsys.exit(3)\n")
    _script(tmp_path, "model.py", MISMATCH_FACTORY)
    python, _ = _reader_gone([sys.executable, "quits.py"], tmp_path)
    assert python == 3  # the reference: python's own status under `| true`
    code, err = _reader_gone([sys.executable, "-m", "dtype_doctor", *argv], tmp_path)
    assert code == want, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_closed_stdout_keeps_the_diffs_exit_status(tmp_path):
    _script(
        tmp_path,
        "fails.py",
        """
        import sys
        import torch
        layer = torch.nn.Linear(4, 4).half()
        try:
            layer(torch.randn(2, 4))
        except RuntimeError:
            pass
        sys.exit(3)  # no edit cures the exit: `--diff` shows the closest and fails
        """,
    )
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--diff", "--budget", "60", "fails.py"]
    shown = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert shown.stdout.startswith("---"), shown.stderr  # a diff is written to stdout
    code, err = _reader_gone(argv, tmp_path)
    assert code == shown.returncode != 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


# H16: a program that closes fd 2 (or reuses it for a file of its own) and exits 4
CLOSES_STDERR = {
    "closes": "import os, sys\nos.close(2)\nsys.exit(4)\n",
    "reuses": "import os, sys\nos.close(2)\nlog = open('mine.log', 'w')\nsys.exit(4)\n",
}


@pytest.mark.parametrize("kind", sorted(CLOSES_STDERR))
def test_a_program_closing_stderr_keeps_its_code_and_the_report(tmp_path, kind):
    _script(tmp_path, "quiet.py", CLOSES_STDERR[kind])
    python = subprocess.run([sys.executable, "quiet.py"], env=ENV, cwd=tmp_path, timeout=60)
    assert python.returncode == 4
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--json=out.json", "quiet.py"]
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert done.returncode == 4, done.stderr
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["tool"] == "run" and report["meta"]["program"] == "quiet.py"
    if kind == "reuses":  # fd 2 is the program's file now: the tool writes nothing into it
        assert (tmp_path / "mine.log").read_text() == ""
    on_stdout = subprocess.run(
        [*argv[:3], "run", "--json", "quiet.py"], capture_output=True, text=True, env=ENV, cwd=tmp_path
    )
    assert on_stdout.returncode == 4 and json.loads(on_stdout.stdout)["tool"] == "run", on_stdout.stderr


# H19: a program ending in os._exit(N): python's N, and a report of the run up to there
OS_EXIT = {
    "after-a-mismatch": (
        """
        import os
        import torch
        layer = torch.nn.Linear(4, 4).half()
        try:
            layer(torch.randn(2, 4))
        except RuntimeError:
            pass
        print("done", flush=True)
        os._exit(0)
        """,
        0,
    ),
    "clean": ("import os\nimport torch\ntorch.ones(2) + 1\nos._exit(5)\n", 5),
}


@pytest.mark.parametrize("kind", sorted(OS_EXIT))
def test_a_program_ending_in_os_exit_keeps_its_code_and_is_reported(tmp_path, kind):
    source, status = OS_EXIT[kind]
    _script(tmp_path, "leaves.py", source)
    python = subprocess.run([sys.executable, "leaves.py"], env=ENV, cwd=tmp_path, timeout=120)
    assert python.returncode == status
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--json=out.json", "leaves.py"]
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert done.returncode == status, done.stderr
    assert f"os._exit({status})" in done.stderr, done.stderr  # one line says how the program ended
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["meta"]["ended_by"] == f"os._exit({status})"
    codes = [f["code"] for f in report["findings"]]
    assert ("matmul-dtype-mismatch" in codes) == (kind == "after-a-mismatch"), codes


# H18: a full disk when `run --write` backs the file up: no empty or partial FILE.orig, FILE whole
FULL_DISK_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* write(2) to a file under the folder $FULL_DISK_AT fails as on a full disk */
ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    const char *folder = getenv("FULL_DISK_AT");
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = folder && fd > 2 ? readlink(link, path, sizeof path - 1) : -1;
    if (n > 0) {
        path[n] = 0;
        if (strncmp(path, folder, strlen(folder)) == 0) {
            errno = ENOSPC;
            return -1;
        }
    }
    return real(fd, buf, count);
}
"""

FIXABLE = """
import torch
layer = torch.nn.Linear(4, 4).half()
print(layer(torch.randn(2, 4)).shape)
"""


def _full_disk_env(tmp_path: Path, folder: Path) -> dict[str, str]:
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not Path("/proc/self/fd").is_dir():
        pytest.skip("needs a C compiler and /proc to make writes fail as on a full disk")
    (tmp_path / "full.c").write_text(FULL_DISK_SHIM)
    lib = tmp_path / "full.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "full.c"), "-ldl"], check=True)
    return {**ENV, "LD_PRELOAD": str(lib), "FULL_DISK_AT": f"{folder}/"}


def test_a_full_disk_at_backup_leaves_no_orig_and_the_file_whole(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    script = _script(work, "fails.py", FIXABLE)
    before = script.read_bytes()
    env = _full_disk_env(tmp_path, work)  # the script's folder is full; the scratch copies are not
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--write", "fails.py"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, timeout=300)
    assert done.returncode != 0, done.stderr
    assert "internal error" not in done.stderr and "OSError" not in done.stderr
    assert "not written: cannot write the backup" in done.stderr and "No space left" in done.stderr, (
        done.stderr
    )
    assert sorted(p.name for p in work.iterdir()) == ["fails.py"]  # no FILE.orig, empty or partial
    assert script.read_bytes() == before


@pytest.mark.parametrize("backup", [True, False], ids=["backup", "no-backup"])
def test_a_full_disk_under_one_file_of_a_patch_writes_none_of_them(tmp_path, backup):
    """A patch of two files whose second folder is full: the first is left (or put back) as it was,
    and no backup stays behind."""
    roomy, full = tmp_path / "roomy", tmp_path / "full"
    roomy.mkdir()
    full.mkdir()
    (roomy / "a.py").write_text("a = 1\n")
    (full / "b.py").write_text("b = 1\n")
    code = f"""
import sys
from dtype_doctor.errors import DoctorError
from dtype_doctor.patching.write import write_files
files = {{{str(roomy / "a.py")!r}: "a = 1\\n", {str(full / "b.py")!r}: "b = 1\\n"}}
try:
    write_files(files, {{p: t.replace("1", "2") for p, t in files.items()}}, backup={backup}, force=True)
except DoctorError as exc:
    print(exc)
    sys.exit(1)
"""
    env = _full_disk_env(tmp_path, full)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1 and "No space left on device" in done.stdout, done.stdout + done.stderr
    assert (roomy / "a.py").read_text() == "a = 1\n" and (full / "b.py").read_text() == "b = 1\n"
    assert sorted(p.name for p in [*roomy.iterdir(), *full.iterdir()]) == ["a.py", "b.py"]


# H26: a script whose name is not UTF-8 (b"caf\xe9.py" on Linux): valid SARIF, annotations and JSON
CAUGHT_MISMATCH = """
import torch
layer = torch.nn.Linear(4, 4).half()
try:
    layer(torch.randn(2, 4))
except RuntimeError:
    pass
"""


@pytest.mark.skipif(sys.platform != "linux", reason="a file name of any bytes: Linux")
@pytest.mark.parametrize("fmt", ["sarif", "github", "json"])
def test_a_script_name_that_is_not_utf8_gives_valid_output(tmp_path, fmt):
    import os

    name = os.fsdecode(b"caf\xe9.py")
    _script(tmp_path, name, CAUGHT_MISMATCH)
    env = {**ENV, "DTYPE_DOCTOR_BUDGET": "0"}
    argv = [sys.executable, "-m", "dtype_doctor", "run", "-o", fmt, name]
    done = subprocess.run(argv, capture_output=True, env=env, cwd=tmp_path, timeout=300)
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0 and "internal error" not in err, err
    out = done.stdout.decode("utf-8")  # strict: valid UTF-8
    if fmt == "github":
        (line,) = out.splitlines()
        assert line.startswith("::error file=caf\\xe9.py,line=5,"), line
    elif fmt == "sarif":
        (result,) = json.loads(out)["runs"][0]["results"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == "caf%E9.py" and location["region"]["startLine"] == 5
    else:  # JSON keeps the name whole: an escaped surrogate that decodes to the bytes on disk
        assert os.fsencode(json.loads(out)["meta"]["program"]) == b"caf\xe9.py"
    if fmt != "json":
        assert "\\udce9" not in out  # the byte is shown as the byte, never as a lone surrogate


# H30: `explain trian.log` (a mistyped log name) says the file does not exist; error text still works
def test_explain_of_a_missing_log_name_says_no_such_file(tmp_path):
    (tmp_path / "train.log").write_text("RuntimeError: expected scalar type Half but found Float\n")
    run = [sys.executable, "-m", "dtype_doctor", "explain"]
    for name in ("trian.log", "logs/rank0.txt"):
        done = subprocess.run(
            [*run, name], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=120
        )
        assert done.returncode == 2 and done.stdout == "", done.stdout
        (line,) = done.stderr.splitlines()
        assert f"{name}: no such file" in line, line
    assert (
        "did you mean train.log?"
        in subprocess.run(
            [*run, "trian.log"], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=120
        ).stderr
    )
    for text in ("mat1 and mat2 must have the same dtype, but got Float and Half", "train.log"):
        done = subprocess.run(
            [*run, text], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=120
        )
        assert done.returncode == 0 and "no such file" not in done.stderr, done.stderr


# H25: no fix 1 is labelled "only an error's first fixes are replayed"; a fix not run says why
ENDINGS = {"sys-exit": "sys.exit(3)", "interrupt": "raise KeyboardInterrupt"}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_the_first_fix_is_replayed_or_says_why_not(tmp_path, ending):
    _script(tmp_path, "ends.py", CAUGHT_MISMATCH + f"import sys\n{ENDINGS[ending]}\n")
    env = {**ENV, "DTYPE_DOCTOR_BUDGET": "0"}
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--json=out.json", "ends.py"]
    subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    (finding,) = json.loads((tmp_path / "out.json").read_text())["findings"]
    labels = [fix["verification"] for fix in finding["fixes"]]
    assert not any("first fixes are replayed" in label for label in labels), labels
    if ending == "sys-exit":  # sys.exit is how a program ends: its failure is replayed as any other
        assert labels[0].startswith("verified: passes"), labels
    else:  # the user stopped it: nothing more runs, and the label says so
        assert labels[0] == "not verified (the program was stopped by KeyboardInterrupt before the replay)"


# H20: a nested (jagged) tensor's symbolic size ("j0") in the JSON report meets the shipped schema
JAGGED = """
import torch
a = torch.randn(2, 8, dtype=torch.float16)
b = torch.randn(3, 8, dtype=torch.float16)
batch = torch.nested.nested_tensor([a, b], layout=torch.jagged)
weight = torch.randn(8, 8)  # float32
out = torch.matmul(batch, weight)
"""


def test_a_jagged_tensors_report_meets_the_schema_and_merges(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from dtype_doctor.report import json_schema

    _script(tmp_path, "jagged.py", JAGGED)
    env = {**ENV, "DTYPE_DOCTOR_BUDGET": "0"}
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--json=out.json", "jagged.py"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 1, done.stderr  # the program's own failure (fp16 @ fp32)
    report = json.loads((tmp_path / "out.json").read_text())
    jsonschema.validate(report, json_schema())
    shapes = [op["shape"] for f in report["findings"] for op in f["operands"] if op.get("shape")]
    assert any(isinstance(n, str) and n.startswith("j") for s in shapes for n in s), shapes  # ragged: "j0"
    merged = subprocess.run(
        [sys.executable, "-m", "dtype_doctor", "merge", "--json=merged.json", "out.json"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=120,
    )
    assert merged.returncode == 1 and "not a dtype-doctor JSON report" not in merged.stderr, merged.stderr
    jsonschema.validate(json.loads((tmp_path / "merged.json").read_text()), json_schema())


# H23: building a float16 nested tensor (a view of its values with float32 metadata tensors) is clean
def test_building_a_half_nested_tensor_is_no_promotion(tmp_path):
    _script(tmp_path, "nested.py", JAGGED.replace("out = torch.matmul(batch, weight)", "print(batch.dtype)"))
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--diff", "--json=out.json", "nested.py"]
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert done.returncode == 0 and "torch.float16" in done.stderr, done.stderr[-2000:]
    assert done.stdout == ""  # --diff: no patch (the program's own output goes to stderr)
    assert json.loads((tmp_path / "out.json").read_text())["findings"] == []


# H21: `run --diff DIR/` (a folder with __main__.py): the re-run runs the patched copy
def test_a_folder_with_main_is_re_run_patched(tmp_path):
    (tmp_path / "app").mkdir()
    _script(tmp_path / "app", "__main__.py", FIXABLE)
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--diff", "app/"]
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert done.stdout.startswith("--- a/app/__main__.py"), done.stderr
    assert "dtype=torch.float16" in done.stdout
    assert "re-run of the patched copy: exit 0, no dtype error" in " ".join(done.stderr.split()), done.stderr
    assert done.returncode == 0, done.stderr


# H4: a file saved while the program runs is not the one that ran: no edit is made against it
EDITED_WHILE_RUNNING = """
import torch

torch.manual_seed(0)
lin = torch.nn.Linear(4, 4).half()
x = torch.randn(2, 4)
with open(__file__) as fh:
    text = fh.read()
with open(__file__, "w") as fh:  # the user saves an edit while the program runs
    fh.write("# edited during the run\\n" + text)
y = lin(x)
"""


@pytest.mark.parametrize("flag", ["--write", "--diff"])
def test_a_file_changed_while_the_program_ran_is_not_edited(tmp_path, flag):
    script = _script(tmp_path, "prog.py", EDITED_WHILE_RUNNING)
    argv = [sys.executable, "-m", "dtype_doctor", "run", flag, "--json=r.json", "prog.py"]
    proc = subprocess.run(argv, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert script.read_text() == "# edited during the run\n" + textwrap.dedent(EDITED_WHILE_RUNNING)
    assert proc.stdout == ""  # --diff: no patch
    report = json.loads((tmp_path / "r.json").read_text())
    patch = next(s for s in report["sections"] if s["type"] == "source_patch")
    assert "prog.py changed while the program ran" in patch["outcome"], patch["outcome"]
    assert not [f for f in report["findings"] if any(x.get("edits") for x in f["fixes"])]


# H5: check --write casts where a half layer takes a float32 activation in the layer's own dtype,
# not a literal: the model converted again (`.float()` to evaluate, `.half()`) still runs
HALF_HEAD = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4).half()

    def forward(self, x):
        h = self.a(x)
        return self.b(h)


def build():
    return Net()
"""


def test_check_write_casts_in_the_consumers_dtype(tmp_path):
    model = _script(tmp_path, "model.py", HALF_HEAD)
    argv = [sys.executable, "-m", "dtype_doctor", "check", "--write", "--no-backup", "model.py:build"]
    done = subprocess.run(
        [*argv, "--input", "2x4"], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "return self.b(h.to(self.b.weight.dtype))" in model.read_text()
    use = "import torch, model\nm = model.build()\nfor convert in (m.float, m.half, m.float):\n    convert()(torch.randn(2, 4, dtype=next(m.parameters()).dtype))\nprint('ok')\n"
    ran = subprocess.run(
        [sys.executable, "-c", use], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=120
    )
    assert ran.stdout == "ok\n", ran.stderr[-1500:]


# H22: a script folder too big to copy whole (a 65 MB sparse data file): a fix in a subpackage is
# re-run in the copy's package, not against the original next to it
def test_a_fix_in_a_subpackage_of_a_big_folder_is_re_run_patched(tmp_path):
    (tmp_path / "pkg").mkdir()
    _script(tmp_path, "pkg/__init__.py", "")
    _script(
        tmp_path,
        "pkg/steps.py",
        """
        import torch


        def step():
            layer = torch.nn.Linear(4, 4).half()
            x = torch.randn(2, 4)
            return layer(x)
        """,
    )
    _script(tmp_path, "main.py", "from pkg.steps import step\n\nprint(step().dtype)\n")
    with open(tmp_path / "weights.bin", "wb") as fh:
        fh.truncate(65 << 20)  # past the copy limit, no disk used
    argv = [sys.executable, "-m", "dtype_doctor", "run", "--diff", "--json=out.json", "main.py"]
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert "+++ b/pkg/steps.py" in done.stdout, done.stderr[-2000:]
    patch = next(
        s for s in json.loads((tmp_path / "out.json").read_text())["sections"] if s["type"] == "source_patch"
    )
    assert patch["verified"] is True, patch["outcome"]
