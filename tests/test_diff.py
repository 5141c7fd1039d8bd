"""run --diff / check --diff on the zoo of real-library scripts (tests/diff_zoo): each run proposes a
diff, the re-run of the patched copy passes, and the test applies the diff itself (`patch -p0` or
`git apply`) and runs the patched script: no dtype error. --write: refuses a dirty git file, writes a
clean one and leaves a backup."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

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
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600, check=False)


def _patch_section(path: Path) -> dict:
    report = json.loads(path.read_text())
    return next(s for s in report["sections"] if s["type"] == "source_patch")


def _apply(diff: str, cwd: Path, tool: str) -> None:
    cmd = ["patch", "-p0"] if tool == "patch" else ["git", "apply", "-p0", "-"]
    subprocess.run(cmd, input=diff, cwd=cwd, text=True, check=True, capture_output=True)


@pytest.fixture(scope="module")
def zoo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """`run --diff` of every zoo script, a few at a time (each in its own directory)."""

    def one(name: str) -> tuple[Path, subprocess.CompletedProcess]:
        folder = tmp_path_factory.mktemp(name.removesuffix(".py"))
        shutil.copy(ZOO / name, folder / name)
        return folder, _cli("run", "--diff", "--json=report.json", "--no-color", name, cwd=folder)

    with ThreadPoolExecutor(max_workers=max(1, min(4, (os.cpu_count() or 2) // 2))) as pool:
        return dict(zip(sorted(CASES), pool.map(one, sorted(CASES)), strict=True))


@pytest.mark.parametrize("name", sorted(CASES))
def test_run_diff_fixes_the_script(name: str, zoo_runs: dict) -> None:
    folder, proc = zoo_runs[name]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RuntimeError" in proc.stderr  # the bug, as the user meets it
    section = _patch_section(folder / "report.json")
    assert section["verified"] is True
    expected = CASES[name] if isinstance(CASES[name], tuple) else (CASES[name],)
    assert any(line in section["diff"] for line in expected), section["diff"]
    assert "re-run of the patched copy: exit 0, no dtype error" in proc.stderr
    measured = re.search(r"error vs fp32: (.*)", re.sub(r"\s+", " ", proc.stderr))
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
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600, check=False)


def test_check_diff_edits_the_factory(tmp_path: Path) -> None:
    shutil.copy(ZOO / "factory_head.py", tmp_path / "factory_head.py")
    proc = _cli(
        "check", "factory_head.py:build", "--input", "2x16:float16", "--diff", "--json=r.json", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    section = _patch_section(tmp_path / "r.json")
    assert (
        "+    model.head = nn.Linear(32, 4, dtype=torch.float16)  # after .half(): float32" in section["diff"]
    )
    assert "+import torch\n" in section["diff"]  # the file had only `from torch import nn`
    _apply(section["diff"], tmp_path, "patch")
    again = _cli("check", "factory_head.py:build", "--input", "2x16:float16", cwd=tmp_path)
    assert again.returncode == 0, again.stdout


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True
    )


def test_write_refuses_a_dirty_git_file_and_writes_a_clean_one(tmp_path: Path) -> None:
    script = tmp_path / "numpy_input.py"
    original = (ZOO / "numpy_input.py").read_text()
    script.write_text(original)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "numpy_input.py")
    _git(tmp_path, "commit", "-qm", "start")
    dirty = original + "# an edit not committed\n"
    script.write_text(dirty)
    proc = _cli("run", "--write", "--no-color", "numpy_input.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert "not written: numpy_input.py has uncommitted changes in git" in proc.stderr
    assert script.read_text() == dirty and not (tmp_path / "numpy_input.py.orig").exists()

    _git(tmp_path, "commit", "-qam", "the edit")
    proc = _cli("run", "--write", "--no-color", "numpy_input.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "written: numpy_input.py" in proc.stderr
    assert "latents = torch.from_numpy(arr).to(torch.float16)\n" in script.read_text()
    assert (tmp_path / "numpy_input.py.orig").read_text() == dirty
    assert _cli_python("numpy_input.py", tmp_path).returncode == 0


def test_clip_before_unscale_is_moved_once_numerics_reports_it(tmp_path: Path) -> None:
    name = "clip_before_unscale.py"
    shutil.copy(ZOO / name, tmp_path / name)
    proc = _cli("run", "--numerics", "--diff", "--json=r.json", "--no-color", name, cwd=tmp_path)
    report = json.loads((tmp_path / "r.json").read_text())
    if not any(f["data"].get("misuse") == "clip-before-unscale" for f in report["findings"]):
        pytest.skip("this build's --numerics does not report clip-before-unscale")
    assert proc.returncode == 0, proc.stderr[-3000:]
    diff = _patch_section(tmp_path / "r.json")["diff"]
    assert "+    scaler.unscale_(optimizer)\n" in diff
    _apply(diff, tmp_path, "patch")
    assert _cli_python(name, tmp_path).returncode == 0
