"""check of a Llama-7B-shape model on meta: an fp32 `inputs_embeds` into an fp16 model.

Shows (1) that a plain meta forward of the same model reports nothing (meta linear/rms-norm kernels
do not check dtypes), (2) that `check` finds the mismatch at the op and module a real run fails on,
(3) the time of the check itself against the plain meta forward, and the peak RSS of the process.

    PYTHONPATH=src python benchmarks/bench_check_llama7b.py [--shape 7b|70b] [--seq 2048] [--repeat 5]

--shape 70b: Llama-2-70B's shape (80 layers, hidden 8192, intermediate 28672, 64 heads, GQA with 8
key/value heads); budget 5 s.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import dtype_doctor as dd
from dtype_doctor.checking.check import mirror_on_meta

LLAMA_7B = dict(
    hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, vocab_size=32000
)
LLAMA_70B = dict(
    hidden_size=8192,
    intermediate_size=28672,
    num_hidden_layers=80,
    num_attention_heads=64,
    num_key_value_heads=8,
    vocab_size=32000,
)
SHAPES = {"7b": LLAMA_7B, "70b": LLAMA_70B}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="7b")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    t0 = time.perf_counter()
    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**SHAPES[args.shape]))
    hidden = SHAPES[args.shape]["hidden_size"]
    build = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    embeds = torch.empty(1, args.seq, hidden, device="meta")  # float32

    plain_model = mirror_on_meta(model).half()
    plain_times, check_times, check_cpu = [], [], []
    report = None
    for _ in range(args.repeat):  # round robin: plain meta forward, then check
        t = time.perf_counter()
        with torch.no_grad():
            plain_model(inputs_embeds=embeds)  # no error: nothing to report
        plain_times.append(time.perf_counter() - t)
        t, c = time.perf_counter(), time.process_time()
        report = dd.check(model, inputs_embeds=embeds, dtype=torch.float16)
        check_times.append(time.perf_counter() - t)
        check_cpu.append(time.process_time() - c)

    plain, checked = statistics.median(plain_times), statistics.median(check_times)
    first = next(f for f in report.findings if f.severity == dd.Severity.ERROR)
    print(
        f"model: Llama-{args.shape.upper()} shape on meta, {params / 1e9:.2f} B parameters, built in {build:.2f} s"
    )
    print(f"input: inputs_embeds 1x{args.seq}x{hidden} float32 into a float16 model")
    print("plain meta forward: no error, 0 findings")
    print(
        f"check: {len(report.errors)} error findings ({sum(f.count for f in report.errors)} mismatches), "
        f"first: {first.code} in '{first.location.module}' ({first.location.op})"
    )
    print(f"time, median of {args.repeat}: plain meta forward {plain:.3f} s, check {checked:.3f} s")
    print(
        f"check CPU time (process_time, less sensitive to a loaded machine): {statistics.median(check_cpu):.3f} s"
    )
    print(f"ratio check / plain meta forward: {checked / plain:.2f}x")
    print(f"peak RSS of the whole process: {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
