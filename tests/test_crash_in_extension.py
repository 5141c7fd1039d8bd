"""A dtype error raised where no watched op sees it (a compiled extension's kernel called inside an
autograd Function, as apex's fused norms are): `run` still names the module it was raised in, the
tensors it was given and where the odd one got its dtype, and reads the family from the frames as
`explain` does. The kernel is stood in for by a function in a site-packages folder that raises the
kernel's message; the real apex kernel runs in tests/gpu/test_gpu_apex.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = """\
import torch


def _kernel(x, weight):  # a C++ kernel's dispatch: the weight must be of the input's type
    if x.dtype != weight.dtype:
        names = {{torch.float16: "Half", torch.float32: "Float", torch.bfloat16: "BFloat16"}}
        raise RuntimeError(f"expected scalar type {{names[x.dtype]}} but found {{names[weight.dtype]}}")
    return torch.nn.functional.layer_norm(x, x.shape[-1:], weight)


class _Fused(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        return _kernel(x, weight)


@torch.library.custom_op("{package}::norm_fwd", mutates_args=())
def norm_fwd(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:  # how apex registers its kernels
    return _kernel(x, weight)


class FusedNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))

    def forward(self, x):
        return {call}
"""
SCRIPT = """\
import torch
from {package}.normalization import FusedNorm

model = torch.nn.Sequential(torch.nn.Linear(8, 8), FusedNorm(8))
model.bfloat16()
model[1].weight.data = model[1].weight.data.float()
x = torch.randn(2, 8, dtype=torch.bfloat16)
print(model(x))
"""


def _report(tmp_path: Path, package: str, call: str) -> tuple[subprocess.CompletedProcess, dict]:
    site = tmp_path / "site-packages"
    (site / package / "normalization").mkdir(parents=True)
    (site / package / "__init__.py").write_text("")
    (site / package / "normalization" / "__init__.py").write_text(KERNEL.format(package=package, call=call))
    (tmp_path / "script.py").write_text(SCRIPT.format(package=package))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")]), "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "dtype_doctor", "run", "--json", "r.json", "script.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return done, json.loads((tmp_path / "r.json").read_text())


def test_an_extension_kernel_error_names_the_module_the_tensors_and_the_odd_ones_birth(
    tmp_path: Path,
) -> None:
    done, report = _report(tmp_path, "fusedops", "_Fused.apply(x, self.weight)")
    assert done.returncode == 1 and "expected scalar type BFloat16 but found Float" in done.stderr
    (finding,) = report["findings"]
    assert finding["location"]["module"] == "1"
    by_role = {o["role"]: o for o in finding["operands"]}
    assert by_role["input"]["dtype"] == "bfloat16"
    weight = by_role["weight"]
    assert weight["dtype"] == "float32"
    assert (weight["origin"]["file"], weight["origin"]["line"]) == ("script.py", 6)


def test_an_apex_custom_op_that_raises_is_apex_conflict_with_uninstall_offered(tmp_path: Path) -> None:
    """apex registers its kernels as torch custom ops: the watched op raises, and apex in the frames
    below it makes the family apex-conflict, whose known fix (uninstall apex) is offered."""
    _, report = _report(tmp_path, "apex", "torch.ops.apex.norm_fwd(x, self.weight)")
    (finding,) = report["findings"]
    assert finding["code"] == "apex-conflict"
    assert finding["location"]["module"] == "1"
    assert any(f["snippet"].startswith("pip uninstall -y apex") for f in finding["fixes"])
