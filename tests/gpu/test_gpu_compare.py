"""compare on a GPU: fp16 and bf16 on a diffusers UNet and on GPT-2 (tiny configs), with the
figures written to $DTYPE_DOCTOR_BENCH_OUT (JSON lines) for docs/benchmarks.md. No timing
assertion: every precision runs, the errors are small, and each speed claim the recommendation
makes is backed by stable timings."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (tests/gpu runs on a GPU machine)", allow_module_level=True)

from dtype_doctor.comparing import compare

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tiny_models
from compare_models import compare_meta

PRECISIONS = ("fp32", "fp16", "bf16", "autocast-fp16", "autocast-bf16")


def unet() -> torch.nn.Module:
    pytest.importorskip("diffusers")  # not on every GPU machine
    return tiny_models.unet(sample_size=32)


def gpt2() -> torch.nn.Module:
    return tiny_models.gpt2(n_layer=4, n_embd=256, vocab_size=1024, n_positions=128)


MODELS = {
    "unet": (unet, {"sample": "8x4x32x32", "timestep": "8:int64", "encoder_hidden_states": "8x16x32"}),
    "gpt2": (gpt2, "8x128:int64"),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_fp16_and_bf16_speed_ups_on_cuda(name):
    factory, inputs = MODELS[name]
    report = compare(
        factory, inputs, precisions=PRECISIONS, keep_fp32=None, device="cuda", repeats=20, warmup=5
    )
    variants = {v["name"]: v for v in compare_meta(report)["variants"]}
    assert all(v["status"] == "ok" for v in variants.values()), variants
    assert variants["fp16"]["error"]["rel_l2"] < 2e-2
    assert variants["bf16"]["error"]["rel_l2"] < 1e-1
    assert all(v["memory_method"] == "cuda-allocator" for v in variants.values())
    rec = report.findings[-1]
    for line in rec.data["reasons"]:
        if "faster than fp32" in line:
            variant = variants[line.split(":")[0]]
            assert variant["timing"]["unstable"] is None and variants["fp32"]["timing"]["unstable"] is None
    out = os.environ.get("DTYPE_DOCTOR_BENCH_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            for v in variants.values():
                row = {"model": name, "device": compare_meta(report)["device_name"], "variant": v["name"]}
                row.update({k: v["timing"][k] for k in ("median_s", "q1_s", "q3_s", "spread", "unstable")})
                row.update(rel_l2=v["error"]["rel_l2"], peak_memory_bytes=v["peak_memory_bytes"])
                fh.write(json.dumps(row) + "\n")
