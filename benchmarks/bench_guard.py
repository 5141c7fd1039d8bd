"""Cost of `guard` on a forward, against the plain forward (same process).

GPT-2-124M shape (12 layers, 768 wide), batch 1 x 128 tokens, inputs already in the model's dtype:
the hooks only look, nothing is cast (the steady state once the producers are fixed). float32, as
CPU half-precision kernels would dominate the time and hide the hooks' cost.

    PYTHONPATH=src python benchmarks/bench_guard.py [--repeat 11]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from transformers import GPT2Config, GPT2Model

import dtype_doctor as dd


def timed(model: torch.nn.Module, embeds: torch.Tensor) -> float:
    t = time.perf_counter()
    with torch.no_grad():
        model(inputs_embeds=embeds)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = GPT2Config(n_embd=768, n_layer=12, n_head=12, bos_token_id=0, eos_token_id=0)
    plain = GPT2Model(config).eval()
    guarded = copy.deepcopy(plain)
    guard = dd.guard(guarded)
    embeds = torch.randn(1, 128, 768)
    times: dict[str, list[float]] = {"plain": [], "guard": []}
    for model in (plain, guarded):
        timed(model, embeds)  # warm-up
    for _ in range(args.repeat):  # round robin
        times["plain"].append(timed(plain, embeds))
        times["guard"].append(timed(guarded, embeds))
    base = statistics.median(times["plain"])
    print(f"GPT-2-124M shape, float32, 1x128 tokens, median of {args.repeat} forwards")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:18s} {med * 1000:8.1f} ms  {med / base:.2f}x")
    print(f"guard hooks installed: {len(guard._handles)}, casts made: {len(guard.report.findings)}")


if __name__ == "__main__":
    main()
