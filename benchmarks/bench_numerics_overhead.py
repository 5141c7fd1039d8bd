"""Overhead of numerics monitoring on a GPT-2-124M-shape model (CPU), as ratios to the plain run.

    PYTHONPATH=src python benchmarks/bench_numerics_overhead.py [--reps 7] [--threads 1] [--dtype float32]
        [--device cpu]

Measured in one process, modes interleaved round by round (median per mode), so the ratios
share the same machine load. For comparison, transformers' DebugUnderflowOverflow runs on a
copy of the model (its hooks cannot be removed). Forward runs under no_grad; forward+backward
backpropagates the mean of the logits.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model
from transformers.debug_utils import DebugUnderflowOverflow

from dtype_doctor.numerics import NumericsMonitor


def _timed(fn: Callable[[], None]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): CPU time is robust to other processes' load."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--no-lm-head", action="store_true", help="GPT2Model: without the 50257-way head")
    parser.add_argument("--device", default="cpu", help="cuda: synchronized after each step")
    args = parser.parse_args()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = (GPT2Model if args.no_lm_head else GPT2LMHeadModel)(config).to(args.device, dtype).eval()
    hf_model = copy.deepcopy(model)
    DebugUnderflowOverflow(hf_model)  # permanent hooks: on its own copy
    ids = torch.randint(0, config.vocab_size, (1, args.seq), device=args.device)

    def fwd(m: torch.nn.Module) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                m(input_ids=ids)

        return run

    def fwd_bwd(m: torch.nn.Module) -> Callable[[], None]:
        def run() -> None:
            m(input_ids=ids)[0].float().mean().backward()
            m.zero_grad(set_to_none=True)

        return run

    measured: dict[int, int] = {}

    def monitored(run: Callable[[], None], **options) -> Callable[[], None]:
        monitor = NumericsMonitor(model=model, scaler=False, **options)

        def go() -> None:
            before = monitor.tensors_measured
            monitor.start()
            try:
                run()
                run()  # the second call's pre-hook analyses the first step: the read-back is timed
            finally:
                monitor.stop()
            measured[id(go)] = (monitor.tensors_measured - before) // 2

        return go

    def twice(run: Callable[[], None]) -> Callable[[], None]:
        def go() -> None:
            run()
            run()

        return go

    modes = {
        "forward: plain": twice(fwd(model)),
        "forward: numerics every=1": monitored(fwd(model), backward=False),
        "forward: transformers DebugUnderflowOverflow": twice(fwd(hf_model)),
        "fwd+bwd: plain": twice(fwd_bwd(model)),
        "fwd+bwd: numerics every=1": monitored(fwd_bwd(model)),
        "fwd+bwd: transformers DebugUnderflowOverflow": twice(fwd_bwd(hf_model)),
    }
    for run in modes.values():  # warm-up
        run()
    walls: dict[str, list[float]] = {name: [] for name in modes}
    cpus: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.reps):
        for name, run in modes.items():
            wall, cpu = _timed(lambda run=run: (run(), sync()))
            walls[name].append(wall / 2)
            cpus[name].append(cpu / 2)
    wall_min = {name: min(t) for name, t in walls.items()}
    cpu_med = {name: statistics.median(t) for name, t in cpus.items()}
    per_step = {name: measured.get(id(run)) for name, run in modes.items()}
    print(
        f"{type(model).__name__}, GPT-2-124M shape, batch 1, seq {args.seq}, {args.dtype}, {args.device}, {args.threads} thread(s), "
        f"{args.reps} rounds, torch {torch.__version__}"
    )
    print("| mode | CPU ms/step (median) | ratio | wall ms/step (min) | ratio | tensors measured/step |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in modes:
        base = "forward: plain" if name.startswith("forward") else "fwd+bwd: plain"
        print(
            f"| {name} | {cpu_med[name] * 1e3:.0f} | {cpu_med[name] / cpu_med[base]:.2f}× "
            f"| {wall_min[name] * 1e3:.0f} | {wall_min[name] / wall_min[base]:.2f}× | {per_step[name] or ''} |"
        )


if __name__ == "__main__":
    main()
