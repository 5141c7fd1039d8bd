"""`run --numerics` in steady state against plain python, one process, side by side (issue 40).

What `run --numerics` keeps running for the whole program is one `watch(numerics=True)` session:
its first step runs the float32 accuracy pass, every later step pays the per-op and per-module
cost only. So: blocks of `--steps` forwards, plain and inside one long session (entered once per
block, its first `--warmup` forwards not timed), interleaved `--rounds` times; medians of the
per-forward times, wall and CPU of the process, and the cost per torch call and per module output.

Models, bfloat16, batch 1, eval, no_grad:
- dispatch-bound: transformers GPT2Model, 12 layers of width 64, seq 8 (each op is microseconds);
- compute-bound: GPT2Model, 4 layers of width 256, seq 128 (bfloat16 matmuls are slow on a CPU).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_numerics_steady.py [--rounds 7] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from dtype_doctor import watch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tiny models live with the tests
from bench_dispatch_bound import _Count  # a TorchFunctionMode that counts torch calls

import tiny_models


def _model(layers: int, width: int, seq: int) -> tuple[torch.nn.Module, torch.Tensor]:
    model = tiny_models.gpt2(n_layer=layers, n_embd=width, n_head=4, n_positions=max(seq, 8))
    model = model.transformer if hasattr(model, "transformer") else model
    ids = torch.randint(0, model.config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))
    return model.to(torch.bfloat16).eval(), ids


def _block(model: torch.nn.Module, ids: torch.Tensor, steps: int, warmup: int, watched: bool) -> tuple:
    wall, cpu = [], []
    session = watch(numerics=True) if watched else None
    if session is not None:
        session.__enter__()
    try:
        for i in range(warmup + steps):
            t0, c0 = time.perf_counter(), time.process_time()
            model(ids)
            if i >= warmup:
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
    finally:
        if session is not None:
            session.__exit__(None, None, None)
    return wall, cpu


def measure(name: str, layers: int, width: int, seq: int, rounds: int, steps: int, warmup: int) -> None:
    torch.manual_seed(0)
    model, ids = _model(layers, width, seq)
    counter = _Count()
    with torch.no_grad():
        with counter:
            model(ids)
        modules = len(list(model.modules()))
        times = {False: ([], []), True: ([], [])}
        _block(model, ids, 2, 2, False)
        _block(model, ids, 2, warmup, True)
        for _ in range(rounds):
            for watched in (False, True):
                wall, cpu = _block(model, ids, steps, warmup if watched else 1, watched)
                times[watched][0].extend(wall)
                times[watched][1].extend(cpu)
    plain_w, plain_c = (statistics.median(v) for v in times[False])
    num_w, num_c = (statistics.median(v) for v in times[True])
    print(f"\n{name}: {counter.n} torch calls, {modules} modules per forward")
    print(f"  plain            {plain_w * 1e3:8.2f} ms wall  {plain_c * 1e3:8.2f} ms CPU")
    print(
        f"  run --numerics   {num_w * 1e3:8.2f} ms wall  {num_c * 1e3:8.2f} ms CPU"
        f"   x plain {num_w / plain_w:.2f} wall, {num_c / plain_c:.2f} CPU"
    )
    print(
        f"  added per torch call {(num_c - plain_c) * 1e6 / counter.n:.2f} us CPU, or"
        f" per module call {(num_c - plain_c) * 1e6 / modules:.1f} us CPU"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--only", choices=("dispatch", "compute"), default=None)
    a = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, cpu, bfloat16, 1 thread, {a.rounds} rounds of {a.steps} forwards, medians"
    )
    if a.only in (None, "dispatch"):
        measure("dispatch-bound: GPT2Model 12x64, seq 8", 12, 64, 8, a.rounds, a.steps, a.warmup)
    if a.only in (None, "compute"):
        measure("compute-bound: GPT2Model 4x256, seq 128", 4, 256, 128, a.rounds, a.steps // 4 or 1, a.warmup)


if __name__ == "__main__":
    main()
