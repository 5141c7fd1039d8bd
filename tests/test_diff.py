"""run --diff / check --diff on the zoo of real-library scripts (tests/diff_zoo): each run proposes a
diff, the re-run of the patched copy passes, and the test applies the diff itself (`patch -p1` or
`git apply`) and runs the patched script: no dtype error. --write: refuses a dirty git file, writes a
clean one and leaves a backup."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest

from cli_process import python  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "diff_zoo"
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
    "OMP_NUM_THREADS": "1",
}

# script -> a line the diff adds (what the user reads)
CASES = {
    "onetrainer_mask.py": "+latent_mask = torch.ones(1, 1, 16, 16, dtype=torch.float16)  # made like the latents",
    "xcomposer_clip.py": (  # the shown fix, pasted where it says (the structural cast at the birth equals it)
        "+    image_embeds = image_embeds.to(torch.float16)",
        "+    image_embeds = vision(pixel_values=image).last_hidden_state.to(torch.float16)",
    ),
    "cogvlm_bias.py": "+model.to(torch.float16)",
    "onediff_autocast.py": "+with torch.no_grad():",
    "head_after_half.py": "+model.head = nn.Linear(32, 4, dtype=torch.float16)  # built in the default dtype",
    "controlnet_fp32.py": "+        self.proj = nn.Conv2d(4, 4, 3, padding=1, dtype=torch.float16)",
    "numpy_input.py": "+latents = torch.from_numpy(arr).to(torch.float16)",
    "pil_image.py": "[None].to(torch.float16)",
    "lora_adapter.py": "+model.to(torch.float16)\n print(model(x).dtype)",
    "kv_cache.py": "+cache = torch.zeros(1, 4, 16, dtype=torch.float16)  # preallocated, default dtype",
}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "dtype_doctor", *args]
    return python(cmd, cwd=cwd, env=ENV, timeout=600)


def _patch_section(path: Path) -> dict:
    report = json.loads(path.read_text())
    return next(s for s in report["sections"] if s["type"] == "source_patch")


def _apply(diff: str, cwd: Path, tool: str) -> None:
    cmd = ["patch", "-p1"] if tool == "patch" else ["git", "apply", "-p1", "-"]
    subprocess.run(cmd, input=diff, cwd=cwd, text=True, check=True, capture_output=True)


def _zoo_run(name: str, folder: Path) -> tuple[Path, subprocess.CompletedProcess]:
    shutil.copy(ZOO / name, folder / name)
    return folder, _cli("run", "--diff", "--json=report.json", "--no-color", name, cwd=folder)


class _Started(dict):
    """{test key: the future of its first, longest program}, each in a directory of its own;
    a key not started yet starts when a test asks for it."""

    def __init__(self, pool: ThreadPoolExecutor, tmp: pytest.TempPathFactory) -> None:
        super().__init__()
        self.pool, self.tmp = pool, tmp
        self.jobs = {name: partial(_zoo_run, name) for name in CASES} | {
            "test_check_diff_edits_the_factory": _check_diff_factory,
            "test_write_refuses_a_dirty_git_file_and_writes_a_clean_one_without_a_backup": _write_dirty_then_clean,
            "test_clip_before_unscale_is_moved_once_numerics_reports_it": _clip_diff,
        }

    def __missing__(self, key: str) -> Future:
        self[key] = self.pool.submit(self.jobs[key], self.tmp.mktemp(key.removesuffix(".py")))
        return self[key]


@pytest.fixture(scope="module")
def started(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Run serially (a 2-core CI: the test process mostly waits), every selected test's program
    starts at once, as many at a time as there are cores (at most 4): a test waits for its own while
    the others run on. Under pytest-xdist, whose workers share out the tests and the cores, each
    starts when its test asks, one at a time."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        with ThreadPoolExecutor(max_workers=1) as pool:
            yield _Started(pool, tmp_path_factory)
        return
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        ahead = _Started(pool, tmp_path_factory)
        here = Path(__file__).resolve()
        for item in request.session.items:
            if item.path == here:
                params = getattr(item, "callspec", None)
                ahead[params.params["name"] if params else item.originalname]  # started now
        yield ahead
        pool.shutdown(cancel_futures=True)  # after -x stopped the session: none not started yet


@pytest.mark.parametrize("name", sorted(CASES))
def test_run_diff_fixes_the_script(name: str, started: dict) -> None:
    folder, proc = started[name].result()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RuntimeError" in proc.stderr  # the bug, as the user meets it
    section = _patch_section(folder / "report.json")
    assert section["verified"] is True
    expected = CASES[name] if isinstance(CASES[name], tuple) else (CASES[name],)
    assert any(line in section["diff"] for line in expected), section["diff"]
    assert "re-run of the patched copy: exit 0, no dtype error" in proc.stderr
    measured = re.search(r"error vs fp32: (.*)", re.sub(r"\s+", " ", section["outcome"]))
    assert measured and re.match(
        r"max rel\. error \S+ vs fp32 \(the last call of \w+|not measured \(", measured[1]
    )
    if name == "numpy_input.py":  # an fp16 MLP vs its fp32 twin: a real, small error
        err = float(re.search(r"max rel\. error (\S+) vs fp32", measured[0])[1])
        assert 0 < err < 1e-2
    assert (folder / name).read_text() == (ZOO / name).read_text()  # --diff writes nothing
    _apply(section["diff"], folder, "patch" if sorted(CASES).index(name) % 2 else "git")
    after = _cli_python(name, folder)
    assert after.returncode == 0, after.stderr[-3000:]


def _cli_python(name: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, name]
    return python(cmd, cwd=cwd, env=ENV, timeout=600)


def _check_diff_factory(folder: Path) -> tuple[Path, subprocess.CompletedProcess]:
    shutil.copy(ZOO / "factory_head.py", folder / "factory_head.py")
    return folder, _cli(
        "check", "factory_head.py:build", "--input", "2x16:float16", "--diff", "--json=r.json", cwd=folder
    )


def test_check_diff_edits_the_factory(started: dict) -> None:
    folder, proc = started["test_check_diff_edits_the_factory"].result()
    assert proc.returncode == 0, proc.stderr[-3000:]
    section = _patch_section(folder / "r.json")
    assert (
        "+    model.head = nn.Linear(32, 4, dtype=torch.float16)  # after .half(): float32" in section["diff"]
    )
    assert "+import torch\n" in section["diff"]  # the file had only `from torch import nn`
    _apply(section["diff"], folder, "patch")
    again = _cli("check", "factory_head.py:build", "--input", "2x16:float16", cwd=folder)
    assert again.returncode == 0, again.stdout


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True
    )


def _write_dirty_then_clean(folder: Path) -> dict:
    """`run --write` on a file with uncommitted changes, then again once they are committed: each
    run's process and what the folder held after it."""
    script = folder / "numpy_input.py"
    original = (ZOO / "numpy_input.py").read_text()
    script.write_text(original)
    _git(folder, "init", "-q")
    _git(folder, "add", "numpy_input.py")
    _git(folder, "commit", "-qm", "start")
    dirty = original + "# an edit not committed\n"
    script.write_text(dirty)
    refused = _cli("run", "--write", "--no-color", "numpy_input.py", cwd=folder)
    after_refused = script.read_text(), (folder / "numpy_input.py.orig").exists()
    _git(folder, "commit", "-qam", "the edit")
    written = _cli("run", "--write", "--no-color", "numpy_input.py", cwd=folder)
    return {"folder": folder, "dirty": dirty, "refused": (refused, *after_refused), "written": written}


def test_write_refuses_a_dirty_git_file_and_writes_a_clean_one_without_a_backup(started: dict) -> None:
    runs = started["test_write_refuses_a_dirty_git_file_and_writes_a_clean_one_without_a_backup"].result()
    folder, dirty = runs["folder"], runs["dirty"]
    proc, text, backup_made = runs["refused"]
    assert proc.returncode == 1
    assert "not written: numpy_input.py has uncommitted changes in git" in proc.stderr
    assert text == dirty and not backup_made

    proc = runs["written"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "written: numpy_input.py" in proc.stderr
    assert "latents = torch.from_numpy(arr).to(torch.float16)\n" in (folder / "numpy_input.py").read_text()
    assert not (folder / "numpy_input.py.orig").exists()  # tracked and clean: git is the backup
    assert "no backup, git has it (git checkout -- numpy_input.py undoes the write)" in " ".join(
        proc.stderr.split()
    )
    assert _cli_python("numpy_input.py", folder).returncode == 0


def _clip_diff(folder: Path) -> tuple[Path, subprocess.CompletedProcess]:
    shutil.copy(ZOO / "clip_before_unscale.py", folder / "clip_before_unscale.py")
    return folder, _cli(
        "run", "--numerics", "--diff", "--json=r.json", "--no-color", "clip_before_unscale.py", cwd=folder
    )


def test_clip_before_unscale_is_moved_once_numerics_reports_it(started: dict) -> None:
    folder, proc = started["test_clip_before_unscale_is_moved_once_numerics_reports_it"].result()
    report = json.loads((folder / "r.json").read_text())
    if not any(f["data"].get("misuse") == "clip-before-unscale" for f in report["findings"]):
        pytest.skip("this build's --numerics does not report clip-before-unscale")
    assert proc.returncode == 0, proc.stderr[-3000:]
    diff = _patch_section(folder / "r.json")["diff"]
    assert "+    scaler.unscale_(optimizer)\n" in diff
    _apply(diff, folder, "patch")
    assert _cli_python("clip_before_unscale.py", folder).returncode == 0
