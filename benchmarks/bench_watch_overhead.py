"""Observe-mode overhead of `dtype_doctor.watch` as a ratio to the plain forward, same process.

Models: a GPT-2-124M-shape transformer (transformers GPT2Config n_layer=12, n_embd=768, seq 128)
and a small diffusers UNet, both fp32 on CPU with random weights. Plain and watched forwards
are interleaved (plain, watched, plain, watched, ...) so that machine noise hits both alike;
the figures are medians. Budget (DESIGN.md): ≤ 1.10× for GPT-2-124M.

    PYTHONPATH=src python benchmarks/bench_watch_overhead.py [--reps 15] [--threads N]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import torch

from dtype_doctor import watch


def gpt2_124m():
    from transformers import GPT2Config, GPT2Model

    model = GPT2Model(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257))
    return model, (torch.randint(0, 50257, (1, 128)),), {}


def small_unet():
    from diffusers import UNet2DConditionModel

    model = UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=1,
        cross_attention_dim=32,
        attention_head_dim=8,
        sample_size=32,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        norm_num_groups=8,
    )
    return model, (torch.randn(2, 4, 32, 32), torch.tensor([10, 500])), {"encoder_hidden_states": torch.randn(2, 8, 32)}


def measure(make, reps: int) -> dict[str, float]:
    torch.manual_seed(0)
    model, args, kwargs = make()
    model.eval()
    plain, watched = [], []
    with torch.no_grad():
        for _ in range(3):  # warm-up both paths
            model(*args, **kwargs)
            with watch(model=model):
                model(*args, **kwargs)
        for _ in range(reps):
            t = time.perf_counter()
            model(*args, **kwargs)
            plain.append(time.perf_counter() - t)
            t = time.perf_counter()
            with watch(model=model):
                model(*args, **kwargs)
            watched.append(time.perf_counter() - t)
    p, w = statistics.median(plain), statistics.median(watched)
    return {"plain_ms": p * 1e3, "watch_ms": w * 1e3, "ratio": w / p}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    logging.getLogger("diffusers").setLevel(logging.ERROR)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {opts.reps} interleaved reps, medians")
    print(f"{'model':<22}{'plain ms':>10}{'watch ms':>10}{'ratio':>8}")
    for name, make in (("GPT-2-124M seq128", gpt2_124m), ("UNet tiny 2x32x32", small_unet)):
        r = measure(make, opts.reps)
        print(f"{name:<22}{r['plain_ms']:>10.1f}{r['watch_ms']:>10.1f}{r['ratio']:>7.3f}x")


if __name__ == "__main__":
    main()
