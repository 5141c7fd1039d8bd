"""issue 13, item 2: watch() around a torch.compile'd model (eager, aot_eager, inductor backends).
The compiled program runs as it does without the tool (same outputs, bitwise), the user's own
exception reaches them unchanged, and the report says the compiled regions were not checked."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tiny_models
from dtype_doctor import watch

BACKENDS = ["eager", "aot_eager"]  # inductor: its own test below


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    with warnings.catch_warnings():
        # torch.compile(module) while watch's global module hooks exist: a notice, not an error
        warnings.filterwarnings("ignore", message="Using `torch.compile", category=UserWarning)
        yield
    torch._dynamo.reset()


def need(backend: str) -> None:
    if backend != "inductor":
        return
    try:
        torch.compile(lambda x: x + 1, backend="inductor")(torch.ones(2))
    except Exception as exc:  # no C compiler, no Triton/C++ toolchain: nothing to test here
        pytest.skip(f"inductor cannot build on this machine: {type(exc).__name__}: {exc}")


def tiny_gpt2() -> nn.Module:
    return tiny_models.gpt2(n_layer=1).eval()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compiled_gpt2_runs_under_watch_with_identical_outputs(backend):
    model = tiny_gpt2()
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        expected = torch.compile(model, backend=backend)(ids).logits
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    # before: AssertionError: UnspecializedNNModuleVariable(GPT2LMHeadModel) is already tracked
    # for mutation (dynamo traced the watcher's hooks and mode)
    with watch(model=model) as session, torch.no_grad():
        got = [compiled(ids).logits for _ in range(2)]
    assert all(torch.equal(g, expected) for g in got)
    (notice,) = [f for f in session.report.findings if f.code == "compiled-region-unwatched"]
    assert "stepped aside while dynamo traced" in notice.message and notice.data["graphs"] >= 1
    assert "tool-internal-error" not in session.report.codes()


class Half(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).relu()


def error_of(fn) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def assert_same_user_error(backend: str) -> None:
    model = Half().half()
    x = torch.randn(2, 8)  # float32 into a float16 model
    plain = error_of(lambda: torch.compile(model, backend=backend)(x))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)

    def watched() -> None:
        with watch(model=model):
            compiled(x)

    got = error_of(watched)
    assert type(got) is type(plain)
    assert str(got).splitlines()[0] == str(plain).splitlines()[0]
    assert "same dtype" in str(got) or "Half" in str(got)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_users_own_error_from_a_compiled_fp16_model_survives(backend):
    assert_same_user_error(backend)


@pytest.mark.slow  # inductor builds C++ on first use: ~45 s on 2 CPU cores
def test_inductor_under_watch_same_outputs_and_the_users_own_error():
    need("inductor")
    assert_same_user_error("inductor")
    torch._dynamo.reset()
    model = Half()
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = torch.compile(model, backend="inductor")(x)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="inductor")
    with watch(model=model) as session, torch.no_grad():
        got = compiled(x)
    assert torch.equal(got, expected)
    assert "compiled-region-unwatched" in session.report.codes()
