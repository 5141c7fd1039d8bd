"""Integration costs, as ratios or absolute times on this machine (no timing asserts in tests).

1. HTML report and `merge` for a Llama-7B-shaped model (built on meta: no memory):
   module_dtype_map, render_html, merge_reports over 8 ranks.
2. transformers Trainer, tiny GPT-2, 30 steps: with DtypeDoctorCallback vs without (same process).

    PYTHONPATH=src python benchmarks/integrations.py
"""

from __future__ import annotations

import logging
import tempfile
import time

import torch
import transformers

from dtype_doctor import catalog
from dtype_doctor.dtype_map import module_dtype_map
from dtype_doctor.integrations.transformers import DtypeDoctorCallback
from dtype_doctor.merge import merge_reports
from dtype_doctor.render.html import render_html
from dtype_doctor.report import Location, Operand, Report


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def llama_7b_shape():
    config = transformers.LlamaConfig(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32
    )
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(config).to(torch.float16)


def html_and_merge() -> None:
    model = llama_7b_shape()
    t_map = best(lambda: module_dtype_map(model))
    dmap = module_dtype_map(model)
    report = Report(tool="run", sections=[dmap])
    for i in range(32):
        report.add(
            catalog.finding(
                "matmul-dtype-mismatch",
                message=f"layer {i}",
                location=Location(
                    module=f"model.layers.{i}.self_attn.q_proj", module_type="Linear", op="linear"
                ),
                operands=[Operand("input", "float32", [1, 4096]), Operand("weight", "float16", [4096, 4096])],
            )
        )
    t_html = best(lambda: render_html(report))
    size = len(render_html(report).encode())
    ranks = [Report.from_json(report.to_json()) for _ in range(8)]
    ranks[3].findings = ranks[3].findings[:-1]
    t_merge = best(lambda: merge_reports(ranks, list(range(8))))
    print(f"Llama-7B shape: {len(dmap.modules)} modules, 32 findings")
    print(f"  module_dtype_map      {t_map * 1000:8.1f} ms")
    print(f"  render_html           {t_html * 1000:8.1f} ms  ({size / 1024:.0f} KiB, self-contained)")
    print(f"  merge_reports 8 ranks {t_merge * 1000:8.1f} ms")


def trainer_ratio(steps: int = 30) -> None:
    transformers.logging.set_verbosity_error()
    logging.getLogger("dtype_doctor").setLevel(logging.ERROR)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    data = [
        {"input_ids": torch.randint(0, 128, (32,)), "labels": torch.randint(0, 128, (32,))} for _ in range(8)
    ]

    def train(callbacks) -> float:
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(config)
        with tempfile.TemporaryDirectory() as out:
            args = transformers.TrainingArguments(
                output_dir=out, max_steps=steps, per_device_train_batch_size=4, logging_steps=5,
                save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
            )  # fmt: skip
            trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
            t0 = time.perf_counter()
            trainer.train()
            return time.perf_counter() - t0

    train([])  # warm-up
    plain = min(train([]) for _ in range(2))
    watched = min(train([DtypeDoctorCallback(summary=False)]) for _ in range(2))
    print(
        f"Trainer, GPT-2 2x64, {steps} steps: plain {plain:.2f} s, with DtypeDoctorCallback {watched:.2f} s"
    )
    print(f"  ratio {watched / plain:.2f}x")


if __name__ == "__main__":
    torch.set_num_threads(1)
    html_and_merge()
    trainer_ratio()
