"""A representative slice of the architecture zoo (`make zoo` runs all of it; results in docs/check.md).

Each model is built from a tiny config derived by tests/zoo/configs.py, loaded for real in fp16 and
bf16 (save_pretrained + from_pretrained on CPU) and run: `check` on the fp32 model must agree with that
real run: clean and complete when it runs, the real failing module when it fails (DeBERTa's fp32
q_bias), and with one input planted in float32 its first error is the module where the real run fails.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")

from zoo.run import run_one, verdict  # noqa: E402

SLICE = [
    "llama",  # the masking utilities read the attention mask's values (.all(), .item())
    "bart",  # fp16 clamp behind isfinite().all() of an activation
    "switch_transformers",  # MoE routing through nonzero / boolean indexing
    "mixtral",
    "deberta",  # a parameter made fp32 explicitly: the real fp16/bf16 load fails
    "swinv2",  # a buffer built in the target dtype by from_pretrained
    "gpt2",
    "vit",  # casts its pixel values itself: a planted fp32 input is harmless
    "diffusers:UNet2DConditionModel",
    "diffusers:FluxTransformer2DModel",
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", SLICE)
def test_check_agrees_with_a_real_load_and_run(name, dtype, tmp_path):
    result = run_one(name, dtype, tmp_path)
    assert "skip" not in result, result.get("skip")
    v = verdict(result)
    assert v["complete"], result["incomplete"]
    assert not v["false_positive"], result["check"]
    if v["real_fails_clean"]:
        assert v["real_failure_found"], (result["real"], result["real_module"], result["check"])
    if "planted_found" in v:
        assert v["planted_found"], (
            result["planted_real"],
            result["planted_real_module"],
            result["planted_check"],
        )
    assert not v.get("planted_false_positive"), result["planted_check"]
    assert result["loaded_as"].endswith(("dtype=float16)", "dtype=bfloat16)"))
