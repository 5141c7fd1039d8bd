"""A program that catches its own dtype error inside the watched block still gets verified fixes:
watch keeps the call that failed and replays it at the end."""

import contextlib

import torch

import dtype_doctor as dd

transformers = __import__("pytest").importorskip("transformers")


def _gpt2_half() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=16, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2Model(config).eval().half()


def test_a_caught_error_gets_its_fix_replayed_and_the_fix_runs():
    model = _gpt2_half()
    embeds = torch.randn(1, 4, 32)  # float32 into a float16 GPT-2
    with dd.watch(model=model) as session:
        with contextlib.suppress(RuntimeError):  # the program goes on, as a notebook or a retry loop does
            model(inputs_embeds=embeds)
        model(inputs_embeds=embeds.half())  # later calls succeed: the replay is of the failing one
    top = session.report.errors[0].fixes[0]
    assert top.verified is True, top.verification
    assert "vs fp32" in top.verification
    scope = {"torch": torch, "embeds": embeds, "model": model}
    exec(top.snippet, scope)  # the user's names: `embeds`
    with torch.no_grad():
        out = model(inputs_embeds=scope["embeds"]).last_hidden_state
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
