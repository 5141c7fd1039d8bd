"""Numerics you can leave on (issue 40): silent on correct code, and invisible to torch.compile.

- the float32 reference computes what the module computes in float32, dtypes it carries outside its
  tensors included (an argument `hidden_dtype=`, an attribute), and a failure inside that reference
  is the tool's, never reported as the user's;
- a cast that moves a value by its format's normal rounding is no finding;
- torch.compile builds the same graphs, with no graph break, under `run` and `run --numerics` as
  under plain python, and the results are the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import dtype_doctor as dd

HERE = Path(__file__).resolve()
ENV = {**os.environ, "DTYPE_DOCTOR_BUDGET": "0", "OMP_NUM_THREADS": "1"}


def _loud(report) -> list[tuple[str, str]]:
    return [(f.code, f.message) for f in report.findings if f.severity.value in ("error", "warning")]


def test_a_diffusers_dit_in_bfloat16_gives_no_finding_under_numerics():
    # AdaLayerNormZero passes hidden_dtype=hidden_states.dtype: a float32 copy handed that bfloat16
    # casts its embedding back and meets its own float32 weights (was: matmul-dtype-mismatch, error)
    from diffusers import DiTTransformer2DModel

    torch.manual_seed(0)
    model = DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=8,
        num_layers=2,
        sample_size=8,
        patch_size=2,
        norm_num_groups=4,
        num_embeds_ada_norm=10,
    ).to(torch.bfloat16)
    x = torch.randn(1, 4, 8, 8, dtype=torch.bfloat16)
    with dd.watch(numerics=True) as session, torch.no_grad():
        out = model(x, timestep=torch.tensor([3]), class_labels=torch.tensor([1])).sample
    assert out.dtype == torch.bfloat16 and bool(torch.isfinite(out).all())
    assert _loud(session.report) == []


class _Offset(nn.Module):
    """Computes in the dtype it keeps as an attribute (as quantization states and some attention
    processors do): adds and removes a large offset, which bfloat16 cannot resolve."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.compute_dtype = torch.float32

    def forward(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        wanted = dtype or self.compute_dtype
        y = self.proj(x).to(wanted)
        return ((y + 3000.0) - 3000.0).to(x.dtype)


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _Offset()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x, dtype=x.dtype)


def test_the_float32_reference_follows_a_dtype_passed_as_an_argument_and_finds_the_loss():
    # the reference must compute in float32 where the module is handed bfloat16 as an argument:
    # followed, it sees the offset wipe out the values; not followed, both runs agree and nothing shows
    torch.manual_seed(0)
    model = _Model().to(torch.bfloat16)
    model.block.compute_dtype = torch.bfloat16
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    with dd.watch(numerics=True) as session, torch.no_grad():
        model(x)
    wrong = [f for f in session.report.findings if f.code == "finite-but-wrong"]
    assert wrong and wrong[0].location.module == "block", _loud(session.report)


def test_the_float32_reference_follows_a_dtype_kept_as_an_attribute():
    from dtype_doctor.numerics.apart import float32_inputs, follow_float32
    from dtype_doctor.numerics.opscan import copy_without_hooks

    block = _Offset().to(torch.bfloat16)
    block.compute_dtype = torch.bfloat16
    twin = follow_float32(copy_without_hooks(block).float(), block)
    assert (
        twin.compute_dtype is torch.float32 and block.compute_dtype is torch.bfloat16
    )  # the user's untouched
    args, kwargs = float32_inputs((torch.ones(2, 16, dtype=torch.bfloat16),), {"dtype": torch.bfloat16})
    assert args[0].dtype == torch.float32 and kwargs == {"dtype": torch.float32}
    assert twin(*args, **kwargs).dtype == torch.float32


def test_a_large_activation_cast_down_is_normal_rounding_not_a_finding():
    # bfloat16 spacing above 1024 is 8: -1228.06 becomes -1232, its normal 0.3 % rounding
    torch.manual_seed(0)
    lin = nn.Linear(64, 64).to(torch.bfloat16)
    with dd.watch(numerics=True) as session, torch.no_grad():
        x = (torch.randn(4, 64) * 800).to(torch.bfloat16)
        torch.nn.functional.gelu(lin(x))
    assert _loud(session.report) == []


COMPILED = textwrap.dedent(
    """
    import json, torch
    from torch._dynamo.utils import counters
    torch.manual_seed(0)
    results = []
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)
        def forward(self, x):
            return x + self.b(torch.relu(self.a(x)))
    mlp = torch.nn.Sequential(Block(), Block()).to(torch.bfloat16)
    f = torch.compile(mlp, backend="eager")
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    for _ in range(3):
        results.append(f(x).float().sum().item())
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4))
    g = torch.compile(cnn, backend="aot_eager")
    opt = torch.optim.SGD(cnn.parameters(), lr=0.1)
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = g(torch.randn(2, 3, 8, 8)).float().pow(2).mean()
        loss.backward(); opt.step(); opt.zero_grad()
        results.append(loss.item())
    @torch.compile(backend="eager")
    def attention(q, k):
        return torch.softmax((q @ k.transpose(-1, -2)).float() / 8, -1).to(q.dtype)
    q = torch.randn(2, 4, 8, dtype=torch.float16)
    for _ in range(2):
        results.append(attention(q, q).float().sum().item())
    print(json.dumps({"graphs": counters["stats"]["unique_graphs"],
                      "breaks": sum(counters["graph_break"].values()),
                      "recompiles": sum(counters["recompiles"].values()), "results": results}))
    """
)


@pytest.mark.slow  # ~40-50 s: run first (tests/conftest.py)
def test_torch_compile_builds_the_same_graphs_under_run_and_run_numerics_as_under_python(tmp_path):
    script = tmp_path / "compiled.py"
    script.write_text(COMPILED)
    outcomes = {}
    for name, command in {
        "python": [sys.executable, str(script)],
        "run": [sys.executable, "-m", "dtype_doctor", "run", "--no-color", str(script)],
        "numerics": [sys.executable, "-m", "dtype_doctor", "run", "--numerics", "--no-color", str(script)],
    }.items():
        done = subprocess.run(command, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        outcomes[name] = json.loads(done.stdout.strip().splitlines()[-1])
        if name != "python":
            assert "[warning]" not in done.stderr and "[error]" not in done.stderr, done.stderr[-3000:]
    assert outcomes["python"]["breaks"] == 0
    assert outcomes["run"] == outcomes["python"], outcomes
    assert outcomes["numerics"] == outcomes["python"], outcomes


SAMPLE = ["bert", "t5", "vit", "clip", "diffusers:PixArtTransformer2DModel", "diffusers:AutoencoderKL"]


def test_a_sample_of_the_zoo_is_silent_under_numerics_in_inference_and_autocast_training():
    # the whole zoo: `python -m zoo.numerics_sweep` from tests/ (docs/benchmarks.md has its last run)
    from zoo.numerics_sweep import sweep_one

    results = [sweep_one(name) for name in SAMPLE]
    assert not [r for r in results if "skip" in r], results  # each builds and runs: the test can fail
    loud = {r["name"]: r["inference"] + r.get("training", []) for r in results}
    assert all(v == [] for v in loud.values()), loud
    assert all("training" in r for r in results)


def test_an_inf_that_never_leaves_its_module_or_was_filled_on_purpose_is_no_finding():
    # prophetnet casts a float32 mask of finfo(float32).min to bfloat16 (-inf there) and softmaxes it
    # away; llama4's router scatters top-k logits into a tensor filled with -inf: neither output holds
    # an inf (were: nonfinite-values errors)
    from zoo.numerics_sweep import sweep_one

    results = {name: sweep_one(name) for name in ("prophetnet", "llama4_text")}
    assert all("skip" not in r for r in results.values()), results
    assert {n: r["inference"] + r.get("training", []) for n, r in results.items()} == {
        "prophetnet": [],
        "llama4_text": [],
    }


class _Spill(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 300.0  # beyond float16's 65504 for |x| > 218: the inf is the output


def test_an_inf_that_reaches_the_modules_output_is_still_named():
    with dd.watch(numerics=True) as session, torch.no_grad():
        _Spill()(torch.full((4, 8), 400.0, dtype=torch.float16))
    assert any(f.code in ("nonfinite-values", "fp16-overflow") for f in session.report.findings), [
        (f.code, f.message) for f in session.report.findings
    ]


def test_the_users_own_dispatch_modes_count_under_numerics_what_they_count_under_python():
    # H9: a FlopCounterMode and an op-counting TorchDispatchMode of the user's, entered inside the
    # watch: the monitor's statistics, flags and float32 re-run never reach them (were FLOPs x3, 5 -> 216 ops)
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).to(torch.bfloat16)
    x = torch.randn(4, 16, dtype=torch.bfloat16)

    def counted() -> list[tuple[int, int]]:
        seen = []
        for _ in range(2):
            with FlopCounterMode(display=False) as flops, Count() as ops, torch.no_grad():
                model(x)
            seen.append((flops.get_total_flops(), ops.n))
        return seen

    plain = counted()
    with dd.watch(numerics=True):
        watched = counted()
    assert watched == plain == [(6144, 5), (6144, 5)]


def test_a_monitor_that_fails_inside_leaves_no_mode_behind(monkeypatch):
    # an internal error stops monitoring (`_fail`); its op-checking mode must still leave the stack
    # at the end (it stayed pushed for the rest of the process: every later torch call went through it)
    from torch.overrides import _get_current_function_mode_stack

    from dtype_doctor.numerics import monitor

    def broken(self, *args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(monitor.NumericsMonitor, "_pre", broken)
    model = nn.Linear(4, 4).to(torch.bfloat16)
    with dd.watch(numerics=True), torch.no_grad():
        model(torch.randn(2, 4, dtype=torch.bfloat16))
    assert _get_current_function_mode_stack() == []
