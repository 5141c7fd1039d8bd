"""Benchmark: `compare` on a small diffusers UNet and a GPT-2-shaped model, on this CPU.

Prints, per model, the comparison table (median latency with spread, speed-up against fp32,
peak memory, output error), the recommendation, and what compare itself costs: its wall time
as a ratio of one plain fp32 forward measured in the same process, split into the timed runs
and the per-module attribution. No assertion: figures go to docs/compare.md.

    PYTHONPATH=src python benchmarks/bench_compare_cpu.py [--repeats N] [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from dtype_doctor.comparing import compare
from dtype_doctor.sections import CompareResult


def unet_factory():
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=8,
    )


def gpt2_factory():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=4, n_embd=256, n_head=4, vocab_size=4096, n_positions=128, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config)


MODELS = {
    "UNet2DConditionModel (2 blocks, 32/64 ch, 16×16 latents)": (
        unet_factory,
        {"sample": "2x4x16x16", "timestep": "2:int64", "encoder_hidden_states": "2x8x32"},
    ),
    "GPT-2 shape (4 layers, d=256, 4 heads, seq 128)": (
        gpt2_factory,
        {"input_ids": "2x128:int64", "use_cache": False},
    ),
}


def plain_forward_s(factory, inputs, repeats: int) -> float:
    from dtype_doctor.inputs import real_inputs

    torch.manual_seed(0)
    model = factory().eval()
    args, kwargs = real_inputs(inputs, torch.device("cpu"), 0)
    with torch.inference_mode():
        model(*args, **kwargs)
        samples = []
        for _ in range(repeats):
            t = time.perf_counter()
            model(*args, **kwargs)
            samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="fp32 and bf16 only, no keep rows")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0: torch's default); on a shared, oversubscribed machine 1 is far less noisy",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    precisions = (
        ("fp32", "bf16") if args.quick else ("fp32", "fp16", "bf16", "autocast-fp16", "autocast-bf16")
    )
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{torch.backends.cpu.get_cpu_capability()}\n"
    )
    for title, (factory, inputs) in MODELS.items():
        plain = plain_forward_s(factory, inputs, args.repeats)
        t = time.perf_counter()
        report = compare(
            factory,
            inputs,
            precisions=precisions,
            keep_fp32=None if args.quick else "auto",
            repeats=args.repeats,
            warmup=2,
            progress=sys.stderr.isatty(),
        )
        wall = time.perf_counter() - t
        meta = report.section(CompareResult).as_meta()
        print(f"## {title}\n")
        print(
            f"device: {meta['device_name']}; plain fp32 forward {plain * 1e3:.1f} ms (median of {args.repeats})\n"
        )
        print(
            "| precision | status | median ms | IQR ms | speed-up vs fp32 | peak mem MiB | weights MiB | error (rel L2) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        ref = next(v for v in meta["variants"] if v["name"] == "fp32")["timing"]["median_s"]
        for v in meta["variants"]:
            tm = v["timing"] or {}
            err = (v["error"] or {}).get("rel_l2")
            print(
                f"| {v['name']} | {v['status']} | {tm.get('median_s', float('nan')) * 1e3:.1f} | "
                f"{tm.get('q1_s', float('nan')) * 1e3:.1f}–{tm.get('q3_s', float('nan')) * 1e3:.1f} | "
                f"{ref / tm['median_s']:.2f}× | {(v['peak_memory_bytes'] or 0) / 2**20:.1f} | "
                f"{(v['weights_bytes'] or 0) / 2**20:.2f} | {err:.2e} |"
                if tm
                else f"| {v['name']} | {v['status']} | – | – | – | – | – | – |"
            )
        rec = next(f for f in report.findings if f.code == "precision-recommendation")
        print(f"\nrecommendation: {rec.message.splitlines()[0]}")
        measured = sum(
            (v["timing"]["median_s"] * (v["timing"]["repeats"] + 3)) for v in meta["variants"] if v["timing"]
        )
        print(
            f"\ncompare wall time {wall:.1f} s for {len(meta['variants'])} variants; their own runs "
            f"({args.repeats} timed + 2 warm-up + 1 reference each) account for ≈{measured:.1f} s, so "
            f"building, per-module attribution and bookkeeping cost {wall - measured:.1f} s "
            f"({(wall - measured) / plain:.0f} plain fp32 forwards)\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
