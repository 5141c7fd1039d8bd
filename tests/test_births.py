"""Dtype births of what the model holds (issue 29, item 1): a parameter or buffer made while the model
is built under the watch (as under `run`, where the watch starts with the script) has the line that
made it; a module-wide cast is a new birth, its earlier one as parent; never "untracked"."""

from __future__ import annotations

import gc
import inspect
import io
import weakref

import pytest
import torch
from torch import nn

import tiny_models
from dtype_doctor import watch
from dtype_doctor.causes import group_by_cause

UNTRACKED = "untracked (created before watch() started)"
HERE = "tests/test_births.py"


def here() -> int:
    return inspect.currentframe().f_back.f_lineno


def _operand(finding, dtype):
    return next(o for o in finding.operands if o.dtype == dtype)


class PatchTokens(nn.Module):
    """A ViT front whose learned register token is concatenated to the patch tokens."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 4, 4)
        self.register_token = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.token_line = here() - 1

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.stem(images).flatten(2).transpose(1, 2)
        return torch.cat([self.register_token.expand(len(tokens), -1, -1), tokens], dim=1)


def test_a_parameter_made_in_init_under_the_watch_has_its_line_not_untracked():
    with watch() as s:
        front = PatchTokens()
        front.stem.half()  # only the stem was converted
        front(torch.randn(2, 3, 8, 8, dtype=torch.float16))
    (finding,) = s.report.findings
    origin = _operand(finding, "float32").origin
    assert origin.name != UNTRACKED
    assert (origin.kind, origin.name, origin.file, origin.line) == (
        "parameter",
        "register_token",
        HERE,
        front.token_line,
    )


def test_a_module_wide_cast_is_a_new_birth_whose_parent_is_where_the_parameter_was_made():
    with watch() as s:
        mlp = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 6))
        built = here() - 1
        mlp.to(torch.bfloat16)
        cast = here() - 1
        mlp[2].bias = nn.Parameter(torch.zeros(6))  # a loader that left one bias in float32
        loaded = here() - 1
        with pytest.raises(RuntimeError):
            mlp(torch.randn(1, 6, dtype=torch.bfloat16))
    finding = s.report.errors[0]
    weight = next(o for o in finding.operands if o.role == "weight").origin
    assert (weight.kind, weight.name, weight.file, weight.line, weight.dtype) == (
        "parameter",
        "2.weight",
        HERE,
        cast,
        "bfloat16",
    )
    born = next(c for c in weight.chain if c.kind != "call")
    assert (born.file, born.line, born.dtype) == (HERE, built, "float32")
    bias = next(o for o in finding.operands if o.role == "bias").origin
    assert (bias.name, bias.file, bias.line, bias.dtype) == ("2.bias", HERE, loaded, "float32")


def test_a_free_parameter_keeps_the_birth_of_the_tensor_it_wraps_in_a_real_gpt2():
    with watch() as s:
        model = tiny_models.gpt2(head=False).half()
        soft_prompt = nn.Parameter(torch.randn(1, 2, model.config.n_embd))  # tuned in float32
        made = here() - 1
        ids = torch.tensor([[5, 6, 7]])
        embeds = torch.cat([soft_prompt, model.wte(ids)], dim=1)
        with pytest.raises(RuntimeError):
            model(inputs_embeds=embeds)
    seen = [o.origin for f in s.report.findings for o in f.operands if o.dtype == "float32"]
    assert seen and not any(o.name == UNTRACKED for o in seen)
    lines = {(c.file, c.line) for o in seen for c in [o, *o.chain]}
    assert (HERE, made) in lines


def test_a_lone_float32_bias_is_the_root_and_its_fix_casts_that_real_path_once():
    with watch() as s:
        head = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).to(torch.bfloat16)
        for key, value in {"2.bias": torch.zeros(4)}.items():  # a restore that splits weight and bias
            owner, attr = key.rsplit(".", 1)
            setattr(head.get_submodule(owner), attr, nn.Parameter(value))
            loaded = here() - 1
        x = torch.randn(3, 8, dtype=torch.bfloat16)
        with pytest.raises(RuntimeError):
            head(x)
    (finding,) = group_by_cause(s.report).errors
    assert finding.root_cause == f"float32 `2.bias` ({HERE}:{loaded})"
    first = finding.fixes[0]
    assert first.snippet == "head[2].bias.data = head[2].bias.data.to(torch.bfloat16)"
    exec(first.snippet, {"torch": torch, "head": head})  # pasted after the restore, as the title says
    assert head(x).dtype == torch.bfloat16


class SlopeBias(nn.Module):
    """Adds per-channel slopes kept as a plain tensor attribute (not a buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.slopes = torch.linspace(0.5, 1.0, 8)
        self.slopes_line = here() - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + self.slopes


def test_a_plain_tensor_attribute_a_module_wide_cast_skipped_is_the_root_and_becomes_a_buffer():
    with watch() as s:
        layer = SlopeBias().half()
        layer(torch.randn(2, 8, dtype=torch.float16))
    (finding,) = group_by_cause(s.report).findings
    assert finding.root_cause == f"float32 `slopes` ({HERE}:{layer.slopes_line})"
    first = finding.fixes[0]
    assert first.snippet == 'self.register_buffer("slopes", torch.linspace(0.5, 1.0, 8), persistent=False)'
    assert f"({HERE}:{layer.slopes_line})" in first.title

    class Registered(SlopeBias):  # the fix pasted where the attribute is set
        def __init__(self) -> None:
            super().__init__()
            del self.slopes
            exec(first.snippet, {"torch": torch, "self": self})

    assert Registered().half()(torch.randn(2, 8, dtype=torch.float16)).dtype == torch.float16


class PrefixMemory(nn.Module):
    """Queries attend to a learned key/value memory."""

    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(8, 8)
        self.mem_key = nn.Parameter(torch.randn(1, 4, 8))
        self.mem_value = nn.Parameter(torch.randn(1, 4, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(self.query(x), self.mem_key, self.mem_value)


def test_both_float32_operands_of_one_attention_are_cast_by_the_first_fix():
    with watch() as s:
        memory = PrefixMemory().half()
        restored = {"mem_key": torch.randn(1, 4, 8), "mem_value": torch.randn(1, 4, 8)}
        for name, value in restored.items():  # a checkpoint of the memory, restored in float32
            setattr(memory, name, nn.Parameter(value))
        x = torch.randn(1, 3, 8, dtype=torch.float16)
        with pytest.raises(RuntimeError):
            memory(x)
    first = s.report.errors[0].fixes[0]
    assert first.snippet.splitlines() == [
        "memory.mem_key.data = memory.mem_key.data.to(torch.float16)",
        "memory.mem_value.data = memory.mem_value.data.to(torch.float16)",
    ]
    exec(first.snippet, {"torch": torch, "memory": memory})
    assert memory(x).dtype == torch.float16


def test_a_model_built_under_the_watch_is_freed_when_the_program_drops_it():
    with watch():
        model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)).to(torch.bfloat16)
        gone = weakref.ref(model[0])  # the module that owns parameters
        del model
        gc.collect()
        assert gone() is None, "a birth tag kept the dropped model alive"


def test_what_a_checkpoint_holds_is_born_at_the_users_load_line():
    saved = io.BytesIO()
    torch.save({"net": nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).half()}, saved)
    saved.seek(0)
    with watch() as s:
        net = torch.load(saved, weights_only=False)["net"]
        loaded = here() - 1
        with pytest.raises(RuntimeError):
            net(torch.rand(1, 3, 8, 8))
    weight = next(o for o in s.report.errors[0].operands if o.role == "weight").origin
    assert (weight.kind, weight.name, weight.op, weight.file, weight.line, weight.dtype) == (
        "parameter",
        "0.weight",
        "torch.load",
        HERE,
        loaded,
        "float16",
    )
