"""watch and numerics on dispatch-bound models: ratios to plain and to the interception floor.

On a GPU a forward is mostly kernel launches: each torch call costs microseconds of Python and
dispatcher time, and the tool's per-call cost is paid in full. These models make a CPU forward
dispatch-bound the same way (tiny widths, one thread):

- GPT-2 shape: transformers GPT2Model, 12 layers, width 64, seq 1 and seq 16;
- a small diffusers UNet2DConditionModel at 8x8 (tests/tiny_models.unet).

Variants, interleaved round by round in one process (medians): plain; the floor of this technique
(a no-op TorchFunctionMode plus no-op global module forward pre/post hooks); `watch` observe on a
call it has not seen run clean ("observe-1st": every output tagged with the origin of its dtype);
`watch` observe and strict on repeats of a call seen clean (every op checked, no origins tagged
inside: watching/clean_calls.py); `NumericsMonitor` (numerics monitoring, its own module hooks). Printed: ms per
forward, the ratio to plain and to the floor, and µs per torch call (calls counted once with a
counting TorchFunctionMode); the same in CPU time of the process, robust to a loaded machine.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_dispatch_bound.py [--reps 40] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode

from dtype_doctor import watch
from dtype_doctor.numerics import NumericsMonitor
from dtype_doctor.watching import clean_calls

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tiny models live with the tests
import tiny_models

VARIANTS = ("plain", "floor", "observe-1st", "observe", "strict", "numerics")


class _NoOp(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _Count(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def _noop_hook(*_: object) -> None:
    return None


class Floor:
    """A no-op TorchFunctionMode plus no-op global module pre/post hooks: what any such tool pays."""

    def __enter__(self) -> Floor:
        self.handles = [
            register_module_forward_pre_hook(_noop_hook),
            register_module_forward_hook(_noop_hook, always_call=True),
        ]
        self.mode = _NoOp()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.mode.__exit__(None, None, None)
        for h in self.handles:
            h.remove()


def gpt2(seq: int, device: str, dtype: torch.dtype) -> tuple:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_layer=12, n_embd=64, n_head=4, n_positions=64, vocab_size=1000)
    model = GPT2Model(config).to(device, dtype)
    return model, (torch.randint(0, 1000, (1, seq), device=device),), {}


def unet(device: str, dtype: torch.dtype) -> tuple:
    model = tiny_models.unet(sample_size=8, seed=0).to(device, dtype)
    x = torch.randn(1, 4, 8, 8, device=device, dtype=dtype)
    t = torch.tensor([10], device=device)
    ehs = torch.randn(1, 8, 32, device=device, dtype=dtype)
    return model, (x, t), {"encoder_hidden_states": ehs}


def _context(kind: str, model: torch.nn.Module) -> object:
    if kind == "floor":
        return Floor()
    if kind == "observe-1st":
        clean_calls.forget_all()  # (outside the timed part) the call has not been seen clean
        return watch(model=model)
    if kind == "observe":
        return watch(model=model)
    if kind == "strict":
        return watch(model=model, mode="strict")
    if kind == "numerics":
        return NumericsMonitor(model=model, backward=False, shadow=False)
    return None


def measure(name: str, make: Callable[[], tuple], reps: int, device: str) -> dict[str, float]:
    torch.manual_seed(0)
    model, args, kwargs = make()
    model.eval()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    cpu: dict[str, list[float]] = {k: [] for k in VARIANTS}

    def once(kind: str) -> None:
        ctx = _context(kind, model)
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        if ctx is None:
            model(*args, **kwargs)
        else:
            with ctx:
                model(*args, **kwargs)
        sync()
        times[kind].append(time.perf_counter() - t0)
        cpu[kind].append(time.process_time() - c0)

    with torch.no_grad():
        counter = _Count()
        with counter:
            model(*args, **kwargs)
        for _ in range(5):  # warm-up every path
            for k in VARIANTS:
                once(k)
        for v in (*times.values(), *cpu.values()):
            v.clear()
        for _ in range(reps):
            for k in VARIANTS:
                once(k)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    mcpu = {k: statistics.median(v) * 1e3 for k, v in cpu.items()}
    print(f"\n{name}: {counter.n} torch calls per forward, {len(list(model.modules()))} modules")
    print(
        f"{'variant':<10} {'wall ms':>8} {'x plain':>8} {'x floor':>8} {'us/call':>8} | {'CPU ms':>8} {'x floor':>8}"
    )
    for k in VARIANTS:
        per_call = (med[k] - med["plain"]) * 1e3 / counter.n
        print(
            f"{k:<10} {med[k]:8.2f} {med[k] / med['plain']:8.2f} {med[k] / med['floor']:8.2f} {per_call:8.2f}"
            f" | {mcpu[k]:8.2f} {mcpu[k] / mcpu['floor']:8.2f}"
        )
    return med


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--only", choices=("gpt2-1", "gpt2-16", "unet"), default=None)
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    cases = {
        "gpt2-1": ("GPT-2 shape (12 layers, width 64), seq 1", lambda: gpt2(1, a.device, dtype)),
        "gpt2-16": ("GPT-2 shape (12 layers, width 64), seq 16", lambda: gpt2(16, a.device, dtype)),
        "unet": ("UNet2DConditionModel (tiny), 8x8", lambda: unet(a.device, dtype)),
    }
    print(
        f"torch {torch.__version__}, {a.device}, {a.dtype}, {a.threads} thread(s), {a.reps} rounds, medians"
    )
    for key, (name, make) in cases.items():
        if a.only is None or a.only == key:
            measure(name, make, a.reps, a.device)


if __name__ == "__main__":
    main()
