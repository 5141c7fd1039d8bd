"""First, do no harm: observe mode changes no output, holds no memory, never hides the user's error."""

from __future__ import annotations

import gc
import logging
import tracemalloc

import pytest
import torch
from torch import nn

import tiny_models
from dtype_doctor import watch
from dtype_doctor.watching import mode as watch_mode
from dtype_doctor.watching.module_hooks import ModuleHooks
from dtype_doctor.watching.op_judge import OpJudge
from dtype_doctor.watching.tagging import Tagger

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")
logging.getLogger("diffusers").setLevel(logging.ERROR)


@pytest.fixture
def one_thread():
    """Tiny ops on a shared 2-core machine: one intra-op thread is faster and steadier."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _unet():
    model = tiny_models.unet(seed=None)
    inputs = (torch.randn(1, 4, 16, 16), torch.tensor([500]))
    return model, inputs, {"encoder_hidden_states": torch.randn(1, 5, 32)}, lambda out: out.sample


def _gpt2():
    lm = dict(n_positions=64, vocab_size=100, bos_token_id=50256, eos_token_id=50256)
    return tiny_models.gpt2(seed=None, **lm), (torch.randint(0, 100, (2, 16)),), {}, lambda out: out.logits


def _clip_vision_bf16():
    model = tiny_models.clip_vision(seed=None, num_hidden_layers=2, patch_size=4).to(torch.bfloat16)
    # fp32 pixels into a bf16 model: CLIP casts them itself, a real mixed-dtype path
    return model, (torch.randn(2, 3, 16, 16),), {}, lambda out: out.last_hidden_state


@pytest.mark.parametrize("make", [_unet, _gpt2, _clip_vision_bf16], ids=["unet", "gpt2", "clip-bf16"])
def test_observe_mode_outputs_are_bitwise_identical(make, one_thread):
    torch.manual_seed(0)
    model, args, kwargs, pick = make()
    model.eval()
    with torch.no_grad():
        plain = pick(model(*args, **kwargs))
        with watch(model=model) as s:
            watched = pick(model(*args, **kwargs))
        again = pick(model(*args, **kwargs))
    assert watched.dtype == plain.dtype and torch.equal(watched, plain) and torch.equal(again, plain)
    assert s.report.errors == []


def test_memory_stays_flat_over_2000_watched_training_steps(one_thread):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 2))
    x = torch.randn(4, 8)

    def step():
        loss = (model(x * 0.5) ** 2).mean()  # fresh activations and tags every step
        loss.backward()
        model.zero_grad(set_to_none=True)

    with watch(model=model) as s:
        for _ in range(100):
            step()
        gc.collect()
        tags_before, objects_before = len(s.prov), len(gc.get_objects())
        for _ in range(1600):
            step()
        tracemalloc.start()  # slows every allocation: only over the last 300 steps
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(300):
            step()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        tags_after, objects_after = len(s.prov), len(gc.get_objects())
    assert tags_after <= tags_before + 5, (tags_before, tags_after)
    assert objects_after - objects_before < 200, (objects_before, objects_after)
    assert grown < 64 * 1024, f"{grown} bytes kept over 300 steps"
    assert s.report.findings == []


@pytest.mark.parametrize(
    "broken",
    [
        "OpJudge.check_contract",
        "OpJudge.scan",
        "Tagger.tag_untagged",
        "OpJudge.tag",
        "ModuleHooks.on_enter",
        "OpJudge._report",
        "classify",
    ],
)
def test_an_internal_failure_never_replaces_or_hides_the_users_error(monkeypatch, broken):
    def explode(*args, **kwargs):
        raise ZeroDivisionError("tool bug")

    owners = {"OpJudge": OpJudge, "ModuleHooks": ModuleHooks, "Tagger": Tagger}
    owner, _, name = broken.rpartition(".")
    if owner:
        monkeypatch.setattr(owners[owner], name, explode)
    else:
        monkeypatch.setattr(watch_mode, broken, explode)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).half()
    with pytest.raises(RuntimeError) as err, watch(model=model) as s:
        x = torch.randn(2, 4) * torch.ones(2, 4, dtype=torch.float64)  # a promotion: OpJudge.scan
        model(x.float())
    assert str(err.value) == "mat1 and mat2 must have the same dtype, but got Float and Half"
    assert type(err.value) is RuntimeError
    assert "tool-internal-error" in s.report.codes()
    assert "ZeroDivisionError: tool bug" in s.report.meta["internal_errors"][0]
    # and a program that works keeps working, with the same result
    good = nn.Linear(4, 2)
    x = torch.randn(3, 4)
    with watch(model=good):
        out = good(x)
    assert torch.equal(out, good(x))


def test_hooks_and_mode_are_removed_after_the_block():
    from torch.nn.modules import module as module_mod
    from torch.overrides import _get_current_function_mode_stack

    before = (len(module_mod._global_forward_pre_hooks), len(module_mod._global_forward_hooks))
    with pytest.raises(RuntimeError), watch():
        nn.Linear(2, 2).half()(torch.randn(1, 2))
    after = (len(module_mod._global_forward_pre_hooks), len(module_mod._global_forward_hooks))
    assert before == after and _get_current_function_mode_stack() == []


def test_the_users_traceback_has_no_frame_of_the_tool():
    import traceback

    model = torch.nn.Linear(4, 4).half()
    with pytest.raises(RuntimeError) as err, watch(model=model):
        model(torch.randn(2, 4))
    frames = traceback.extract_tb(err.value.__traceback__)
    assert not [f for f in frames if "dtype_doctor" in f.filename], frames
    assert frames[-1].filename.endswith("torch/nn/modules/linear.py")  # where torch itself raises from
    assert str(err.value).startswith("mat1 and mat2 must have the same dtype")
