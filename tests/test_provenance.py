"""Provenance across model borders: module outputs from user code, promotion chains that follow
the operand that set the dtype, no-op casts, parameter names in the outermost model."""

from __future__ import annotations

import contextlib
import inspect
import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tiny_models
from dtype_doctor import watch
from dtype_doctor.causes import root_origin

transformers = pytest.importorskip("transformers")
logging.getLogger("transformers").setLevel(logging.ERROR)

H = torch.float16


def here() -> int:
    return inspect.currentframe().f_back.f_lineno


def _operand(finding, role):
    return next(o for o in finding.operands if o.role == role)


def test_soft_prompt_projector_output_is_named_and_the_chain_follows_the_fp32_operand():
    gpt = tiny_models.gpt2(head=False, n_layer=1, n_embd=32, n_head=2, vocab_size=64).eval().half()
    projector = nn.Linear(8, 32)  # user code, outside the watched model, left in fp32
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(RuntimeError), watch(model=gpt) as s, torch.no_grad():
        prefix = projector(torch.randn(1, 2, 8))
        line = here()
        tokens = gpt.get_input_embeddings()(ids)
        embeds = torch.cat([prefix, tokens], dim=1)
        gpt(inputs_embeds=embeds)
    promo = next(f for f in s.report.findings if f.code == "silent-promotion")
    odd = _operand(promo, "tensors[0]").origin
    assert (odd.kind, odd.op, odd.name, odd.line) == ("output", "Linear", "prefix", line - 1)
    assert odd.describe() == f"output of Linear ('prefix') called at {odd.file}:{line - 1}"
    tok = _operand(promo, "tensors[1]").origin
    assert (tok.kind, tok.op, tok.name) == ("output", "Embedding", "tokens")
    error = next(f for f in s.report.errors)
    origin = _operand(error, "input").origin
    # input -> ... -> the cat's promotion, whose first parent is the fp32 projector output
    chain = [origin]
    while chain[-1].chain:
        chain.append(next(c for c in chain[-1].chain if c.kind != "call"))
    kinds = [(c.kind, c.op) for c in chain]
    assert ("promotion", "torch.cat") in kinds, kinds
    after_cat = chain[kinds.index(("promotion", "torch.cat")) + 1]
    assert (after_cat.kind, after_cat.op, after_cat.dtype) == ("output", "Linear", "float32")
    assert error.root_cause is None  # set by the processor, not by watch
    from dtype_doctor.causes import group_by_cause

    grouped = group_by_cause(s.report)
    # through the cat's promotion to the fp32 projector output: one cause for both findings
    assert len({f.root_cause for f in grouped.findings}) == 1, [f.root_cause for f in grouped.findings]
    head = next(f for f in grouped.findings if f.code == error.code)
    expected = f"float32 output of Linear `prefix` (tests/test_provenance.py:{line - 1}) → 2 findings"
    assert head.root_cause.startswith(expected), head.root_cause
    # the fix the replay verified leads (what reaches the model); the fix at the root follows
    assert head.fixes[0].verified is True and head.fixes[0].snippet == "embeds = embeds.to(torch.float16)"
    assert "prefix = prefix.to(torch.float16)" in [x.snippet for x in head.fixes]


def test_a_cast_that_keeps_the_dtype_takes_the_origin_of_the_tensor_whose_dtype_it_copies():
    layer = nn.Linear(4, 4).half()
    with pytest.raises(RuntimeError), watch(model=layer) as s:
        steps = torch.arange(3).float()  # a deliberate fp32 cast, not the bug
        reference = torch.zeros(3, 4)
        line = here() - 1
        emb = steps[:, None].expand(3, 4) * 1.0
        emb = emb.to(dtype=reference.dtype)  # no-op: fp32 because `reference` is fp32
        layer(emb)
    origin = _operand(s.report.errors[0], "input").origin
    assert (origin.kind, origin.name) == ("input", "input")
    made = next(c for c in origin.chain if c.kind != "call")
    # the line that chose `reference`'s dtype, then where that dtype was born: not the .float() cast
    assert (made.kind, made.line) == ("cast", line + 3)
    assert [(c.kind, c.op, c.line) for c in made.chain] == [("op", "torch.zeros", line)]
    assert (root_origin(origin).op, root_origin(origin).line) == ("torch.zeros", line)


def test_parameters_are_named_in_the_outermost_model_even_when_reached_through_a_helper():
    llm = tiny_models.llama(
        head=True, vocab_size=64, hidden_size=32, intermediate_size=64, num_key_value_heads=4
    ).eval()
    llm.half()
    ids = torch.tensor([[1, 2]])
    with watch() as s, torch.no_grad():  # no model given: roots are what the user calls
        table = llm.get_input_embeddings()
        table(ids)
        llm(input_ids=ids)
        with contextlib.suppress(RuntimeError):
            F.linear(torch.randn(2, 32), table.weight)
    finding = next(f for f in s.report.findings if f.code == "matmul-dtype-mismatch")
    assert _operand(finding, "weight").origin.name == "model.embed_tokens.weight"
