"""The aten ops and bytes numerics monitoring adds per module output: device-independent.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_numerics_ops.py [--steps 8] [--warmup 3]

Every aten op is counted with a TorchDispatchMode (tests/op_counting.py), with the bytes of the
tensors it reads, over `--steps` plain steps and then `--steps` monitored ones after `--warmup`
monitored steps (the first monitored step runs the float32 accuracy pass and counts underflow:
the steady state comes after it). Divided by the floating tensors the model's module calls
return per step (every call's outputs) and by their bytes. The counts are the same on any
machine and device; on a GPU each aten op is at least one kernel launch.

Models: transformers GPT2LMHeadModel, 4 layers of width 256 (vocabulary 128), batch 2 x 128,
bfloat16; diffusers UNet2DConditionModel (tests/tiny_models.unet), batch 2 x 4 x 16 x 16,
bfloat16. Forward under no_grad, and forward+backward of the outputs' mean.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from dtype_doctor.numerics import NumericsMonitor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tiny models live with the tests
import op_counting
import tiny_models


def gpt2() -> tuple[torch.nn.Module, Callable[[torch.nn.Module], Any]]:
    model = tiny_models.gpt2(n_layer=4, n_embd=256, n_head=4, n_positions=128).to(torch.bfloat16).eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 128), generator=torch.Generator().manual_seed(0))
    return model, lambda m: m(input_ids=ids).logits


def unet() -> tuple[torch.nn.Module, Callable[[torch.nn.Module], Any]]:
    model = tiny_models.unet().to(torch.bfloat16).eval()
    g = torch.Generator().manual_seed(0)
    sample = torch.randn(2, 4, 16, 16, generator=g).to(torch.bfloat16)
    context = torch.randn(2, 8, 32, generator=g).to(torch.bfloat16)
    return model, lambda m: m(sample, 10, encoder_hidden_states=context).sample


def steps(model: torch.nn.Module, forward: Callable, train: bool) -> Callable[[], None]:
    def infer() -> None:
        with torch.no_grad():
            forward(model)

    def learn() -> None:
        forward(model).float().mean().backward()
        model.zero_grad(set_to_none=True)

    return learn if train else infer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; {args.warmup} monitored warm-up steps, then {args.steps} counted")
    print(
        "| model | pass | module outputs/step | plain ops/step | monitored ops/step "
        "| extra ops per output | extra bytes read / output bytes | ops added per step |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name, make in (("GPT-2 4x256 bf16, 2x128", gpt2), ("UNet2DCondition tiny bf16, 2x4x16x16", unet)):
        for train in (False, True):
            model, forward = make()
            monitor = NumericsMonitor(model=model, scaler=False)
            cost = op_counting.extra_cost(
                steps(model, forward, train), monitor.start, monitor.stop, args.warmup, args.steps
            )
            plain, mon = cost.plain, cost.monitored
            added = {
                op: (mon.by_op.get(op, 0) - plain.by_op.get(op, 0)) / args.steps
                for op in set(mon.by_op) | set(plain.by_op)
            }
            top = ", ".join(
                f"{op} {n:g}" for op, n in sorted(added.items(), key=lambda kv: -kv[1])[:4] if n > 0
            )
            print(
                f"| {name} | {'fwd+bwd' if train else 'forward'} | {plain.outputs / args.steps:g} "
                f"| {plain.ops / args.steps:g} | {mon.ops / args.steps:g} | {cost.ops_per_output:.2f} "
                f"| {cost.bytes_per_output_byte:.2f}× | {top} |"
            )


if __name__ == "__main__":
    main()
