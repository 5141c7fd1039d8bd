"""tensors.py: the one walker/mapper every torch-side command uses."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import torch
from diffusers.models.unets.unet_2d_condition import UNet2DConditionOutput
from transformers.modeling_outputs import CausalLMOutputWithPast

from dtype_doctor.tensors import cast_floats, iter_tensors, map_tensors, module_tensors, walk

Pair = namedtuple("Pair", "a b")


@dataclasses.dataclass
class Plain:
    x: torch.Tensor
    extra: list


def test_walk_paths_through_library_outputs_and_containers():
    out = CausalLMOutputWithPast(logits=torch.ones(2), hidden_states=(torch.zeros(1), torch.zeros(1)))
    value = {
        "out": out,
        "pair": Pair(torch.ones(1), [torch.ones(1)]),
        "plain": Plain(torch.ones(1), [1, "s"]),
    }
    paths = [p for p, _ in walk(value)]
    assert paths == [
        "out.logits",
        "out.hidden_states[0]",
        "out.hidden_states[1]",
        "pair[0]",
        "pair[1][0]",
        "plain.x",
    ]
    assert [p for p, _ in walk(torch.ones(1))] == ["output"]
    assert len(list(iter_tensors(value))) == 6


def test_max_depth_stops_descending_but_keeps_tensors_at_the_limit():
    nested = (torch.ones(1), [torch.ones(2), [torch.ones(3), [torch.ones(4)]]])
    sizes = [t.numel() for t in iter_tensors(nested, max_depth=3)]
    assert sizes == [1, 2, 3]
    assert [t.numel() for t in iter_tensors(nested)] == [1, 2, 3, 4]


def test_map_rebuilds_model_outputs_namedtuples_and_dataclasses():
    lm = CausalLMOutputWithPast(logits=torch.ones(2), hidden_states=(torch.zeros(1),))
    unet = UNet2DConditionOutput(sample=torch.ones(1, 1, 2, 2))
    value = (lm, unet, Pair(torch.ones(1), 3), Plain(torch.ones(1), [torch.ones(1)]))
    half = cast_floats(value, torch.float16)
    lm16, unet16, pair16, plain16 = half
    assert type(lm16) is CausalLMOutputWithPast and lm16["logits"].dtype == torch.float16
    assert lm16.hidden_states[0].dtype == torch.float16
    assert type(unet16) is UNet2DConditionOutput and unet16.sample.dtype == torch.float16
    assert type(pair16) is Pair and pair16.a.dtype == torch.float16 and pair16.b == 3
    assert type(plain16) is Plain and plain16.extra[0].dtype == torch.float16
    assert lm.logits.dtype == torch.float32  # the input is not modified
    ids = torch.ones(2, dtype=torch.int64)
    assert map_tensors({"ids": ids}, lambda t: t + 1)["ids"].tolist() == [2, 2]


def test_module_tensors_skips_integer_buffers():
    bn = torch.nn.BatchNorm1d(2)
    names = [n for n, _ in module_tensors(bn)]
    assert names == ["weight", "bias", "running_mean", "running_var"]


def test_iter_tensors_is_walk_without_paths_under_every_limit():
    out = CausalLMOutputWithPast(
        logits=torch.ones(2), hidden_states=tuple(torch.zeros(i + 1) for i in range(20))
    )
    value = (
        [torch.ones(3), 1.5, "s", None, {"k": [torch.ones(4), Pair(torch.ones(5), (torch.ones(6),))]}],
        {"out": out, "plain": Plain(torch.ones(7), [torch.ones(8)] * 20)},
        torch.ones(9),
    )
    for depth in (None, 0, 1, 2, 3, 4, 8):
        for items in (None, 0, 1, 2, 16):
            walked = [t for _, t in walk(value, max_depth=depth, max_items=items)]
            fast = list(iter_tensors(value, max_depth=depth, max_items=items))
            assert [id(t) for t in fast] == [id(t) for t in walked], (depth, items)
    assert len(list(iter_tensors(out, max_items=16))) == 1 + 16  # logits, then 16 of the 20 states
    assert list(iter_tensors(torch.ones(1), max_depth=0))  # a bare tensor is always itself
