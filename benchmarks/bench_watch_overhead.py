"""Observe-mode overhead of `dtype_doctor.watch` as a ratio to the plain forward, same process.

Models: a GPT-2-124M-shape transformer (transformers GPT2Config n_layer=12, n_embd=768, seq 128)
and a small diffusers UNet, both fp32 on CPU with random weights. Plain and watched forwards
are interleaved (plain, watched, plain, watched, ...) so that machine noise hits both alike;
the figures are medians. Budget (DESIGN.md): ≤ 1.10× for GPT-2-124M.

    PYTHONPATH=src python benchmarks/bench_watch_overhead.py [--reps 15] [--threads 1] [--device cpu]

--device cuda: the same models on the GPU in --dtype (default float16), synchronized per forward; the
UNet is skipped where diffusers is not installed.

One thread by default: on a shared 2-core machine, two threads per process mostly measure
the neighbours. CPU time (process_time) is reported beside wall time for the same reason.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

from dtype_doctor import watch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tiny models live with the tests
import tiny_models


def _placed(model: torch.nn.Module, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """The model on `device` in `dtype` (as built on CPU fp32: untouched, diffusers warns on .to)."""
    return model if (device, dtype) == ("cpu", torch.float32) else model.to(device, dtype)


def gpt2_124m(device: str, dtype: torch.dtype):
    from transformers import GPT2Config, GPT2Model

    model = GPT2Model(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257))
    return _placed(model, device, dtype), (torch.randint(0, 50257, (1, 128), device=device),), {}


def small_unet(device: str, dtype: torch.dtype):
    model = _placed(tiny_models.unet(sample_size=32, seed=None), device, dtype)
    return (
        model,
        (torch.randn(2, 4, 32, 32, device=device, dtype=dtype), torch.tensor([10, 500], device=device)),
        {"encoder_hidden_states": torch.randn(2, 8, 32, device=device, dtype=dtype)},
    )


def measure(make, reps: int, device: str = "cpu", dtype: torch.dtype = torch.float32) -> dict[str, float]:
    torch.manual_seed(0)
    model, args, kwargs = make(device, dtype)
    model.eval()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    wall: dict[str, list[float]] = {"plain": [], "watch": []}
    cpu: dict[str, list[float]] = {"plain": [], "watch": []}

    def once(kind: str) -> None:
        w, c = time.perf_counter(), time.process_time()
        if kind == "watch":
            with watch(model=model):
                model(*args, **kwargs)
        else:
            model(*args, **kwargs)
        sync()
        wall[kind].append(time.perf_counter() - w)
        cpu[kind].append(time.process_time() - c)

    with torch.no_grad():
        for _ in range(3):  # warm-up both paths
            once("plain")
            once("watch")
        for k in wall:
            wall[k].clear()
            cpu[k].clear()
        for _ in range(reps):
            once("plain")
            once("watch")
    med = {f"{m}_{k}": statistics.median(v[k]) * 1e3 for m, v in (("wall", wall), ("cpu", cpu)) for k in v}
    med["wall_ratio"] = med["wall_watch"] / med["wall_plain"]
    med["cpu_ratio"] = med["cpu_watch"] / med["cpu_plain"]
    return med


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="default: float32 on cpu, float16 elsewhere")
    opts = parser.parse_args()
    dtype = getattr(torch, opts.dtype or ("float32" if opts.device == "cpu" else "float16"))
    if opts.threads:
        torch.set_num_threads(opts.threads)
    logging.getLogger("diffusers").setLevel(logging.ERROR)
    print(
        f"torch {torch.__version__}, {opts.device}, {str(dtype)[6:]}, {torch.get_num_threads()} threads, "
        f"{opts.reps} interleaved reps, medians"
    )
    print("wall: elapsed time; cpu: this process's CPU time (steadier on a shared machine)")
    print(f"{'model':<22}{'plain ms':>10}{'watch ms':>10}{'wall ratio':>12}{'cpu ratio':>11}")
    models = [("GPT-2-124M seq128", gpt2_124m)]
    if importlib.util.find_spec("diffusers") is not None:
        models.append(("UNet tiny 2x32x32", small_unet))
    else:
        print("UNet skipped: diffusers is not installed")
    for name, make in models:
        r = measure(make, opts.reps, opts.device, dtype)
        print(
            f"{name:<22}{r['wall_plain']:>10.1f}{r['wall_watch']:>10.1f}"
            f"{r['wall_ratio']:>11.3f}x{r['cpu_ratio']:>10.3f}x"
        )


if __name__ == "__main__":
    main()
