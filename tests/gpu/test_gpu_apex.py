"""The xDiT case for real: NVIDIA apex's fused RMSNorm kernel (an unmodified apex, built just in
time from ../shared/apex or $DTYPE_DOCTOR_APEX_DIR) in a half-precision model whose norms a loader
kept in float32. The kernel raises `expected scalar type ...` from C++, inside apex's autograd
Function, where no watched op sees it. What the user must read: apex-conflict, the norm's module
path, which tensor is float32 and where it got that dtype, and "uninstall apex" first; and that
uninstalling apex (the library falls back to torch's LayerNorm) makes the same script run.

Needs a CUDA GPU and nvcc; the build takes about 35 s on an H200."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (tests/gpu runs on a GPU machine)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = [
    os.environ.get("DTYPE_DOCTOR_APEX_DIR"),
    ROOT / ".gpu" / "apex",
    ROOT.parent / "shared" / "apex",
]
SCRIPT = """\
import torch
try:  # how model code picks apex up when it is installed
    from apex.normalization import FusedRMSNorm as RMSNorm
except ImportError:
    class RMSNorm(torch.nn.Module):  # the library's own: computes in float32, returns the input's dtype
        def __init__(self, n, eps=1e-6):
            super().__init__()
            self.weight, self.eps = torch.nn.Parameter(torch.ones(n)), eps

        def forward(self, x):
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return (self.weight.float() * h).to(x.dtype)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)
        self.norm = RMSNorm(64)

    def forward(self, x):
        return self.norm(self.proj(x))


model = torch.nn.Sequential(Block(), Block()).cuda().half()
model[1].norm.float()  # the loader keeps norms in float32
x = torch.randn(2, 8, 64, device="cuda", dtype=torch.float16)
print(model(x).float().sum().item())
"""
KEEP_LINE = SCRIPT.splitlines().index("model[1].norm.float()  # the loader keeps norms in float32") + 1


def _apex_source() -> Path:
    for c in CANDIDATES:
        if c and (Path(c) / "csrc" / "layer_norm_cuda_kernel.cu").exists():
            return Path(c)
    pytest.skip("no apex source (../shared/apex, .gpu/apex or DTYPE_DOCTOR_APEX_DIR)")


@pytest.fixture(scope="module")
def apex_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """apex's Python package in a site-packages folder (as pip puts it), its extension built beside it."""
    if shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"):
        pytest.skip("no nvcc to build apex's extension")
    from torch.utils.cpp_extension import load

    source = _apex_source()
    site = tmp_path_factory.mktemp("env") / "site-packages"
    shutil.copytree(source / "apex", site / "apex")
    major, minor = torch.cuda.get_device_capability()
    csrc = source / "csrc"
    load(
        name="fused_layer_norm_cuda",
        sources=[str(csrc / "layer_norm_cuda.cpp"), str(csrc / "layer_norm_cuda_kernel.cu")],
        extra_include_paths=[str(csrc)],
        extra_cflags=["-O3"],
        extra_cuda_cflags=[
            "-O3",
            "--use_fast_math",
            "-maxrregcount=50",
            f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}",
        ],
        build_directory=str(site),
        verbose=False,
    )
    return site


def _run(args: list[str], cwd: Path, site: Path | None) -> subprocess.CompletedProcess:
    path = [str(site)] if site is not None else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(ROOT / "src")]), "COLUMNS": "100"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def _record(name: str, text: str) -> None:
    out = os.environ.get("DTYPE_DOCTOR_GPU_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / name).write_text(text)


def test_apex_kernel_in_a_half_model_is_apex_conflict_at_the_norm_with_its_origin(
    apex_site: Path, tmp_path: Path
) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    plain = _run([sys.executable, "script.py"], tmp_path, apex_site)
    assert plain.returncode != 0 and "expected scalar type" in plain.stderr, plain.stderr[-2000:]
    assert "apex" in plain.stderr  # the kernel is apex's, from the site-packages copy

    explained = subprocess.run(
        [sys.executable, "-m", "dtype_doctor", "explain", "--json", "-"],
        input=plain.stderr, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert json.loads(explained.stdout)["findings"][0]["code"] == "apex-conflict", explained.stdout[-2000:]

    watched = _run(
        [sys.executable, "-m", "dtype_doctor", "run", "--json", "report.json", "script.py"],
        tmp_path,
        apex_site,
    )
    _record("apex_run.txt", watched.stdout + watched.stderr)
    assert watched.returncode != 0  # the script's own failure still wins
    assert "expected scalar type" in watched.stderr  # the user's error, unchanged
    report = json.loads((tmp_path / "report.json").read_text())
    _record("apex_report.json", json.dumps(report, indent=1))
    (finding,) = [f for f in report["findings"] if f["severity"] == "error"]
    assert finding["code"] == "apex-conflict"
    assert finding["location"]["module"] == "1.norm"
    odd = [o for o in finding["operands"] if o["dtype"] == "float32"]
    assert odd and all((o["origin"]["file"], o["origin"]["line"]) == ("script.py", KEEP_LINE) for o in odd)
    assert any("uninstall apex" in f["title"].lower() for f in finding["fixes"])


def test_uninstalling_apex_the_fix_the_case_gives_makes_the_script_run(
    apex_site: Path, tmp_path: Path
) -> None:
    """Without apex on the path the model code falls back to its own RMSNorm, which computes in
    float32 and takes a float16 input with float32 weights (xDiT's fix)."""
    (tmp_path / "script.py").write_text(SCRIPT)
    assert _run([sys.executable, "script.py"], tmp_path, apex_site).returncode != 0
    without = _run([sys.executable, "-m", "dtype_doctor", "run", "script.py"], tmp_path, None)
    _record("apex_uninstalled.txt", without.stdout + without.stderr)
    assert without.returncode == 0, without.stderr[-2000:]


def test_env_names_the_nvidia_apex_build(apex_site: Path, tmp_path: Path) -> None:
    got = _run([sys.executable, "-m", "dtype_doctor", "env", "--json"], tmp_path, apex_site)
    _record("apex_env.json", got.stdout)
    assert "apex" in got.stdout and "nvidia" in got.stdout.lower(), got.stdout[-2000:] + got.stderr[-1000:]
