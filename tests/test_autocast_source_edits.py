"""Source-side pieces of autocast births: a custom_fwd Function lacking custom_bwd, and the paste rules
that re-decorate a function and put a `with` block in place of the line it rewrites."""

from __future__ import annotations

from pathlib import Path

from dtype_doctor.editing.custom_bwd import missing_custom_bwd
from dtype_doctor.editing.paste import paste
from dtype_doctor.editing.source import Source

FUNCTION = """import torch


class Lin(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.t() @ x
"""


def test_a_backward_without_custom_bwd_gets_the_forwards_decorator(tmp_path: Path) -> None:
    path = tmp_path / "fn.py"
    path.write_text(FUNCTION)
    found = missing_custom_bwd(Source.read(str(path)), 14)
    assert found is not None
    assert (found.cls, found.forward_line, found.backward_line) == ("Lin", 6, 12)
    assert found.decorator == '@torch.amp.custom_bwd(device_type="cpu")'  # no cast_inputs
    done = FUNCTION.replace(
        "    def backward", '    @torch.amp.custom_bwd(device_type="cpu")\n    def backward'
    )
    path.write_text(done)
    assert missing_custom_bwd(Source.read(str(path)), 15) is None


def test_a_snippet_of_decorators_and_signature_redecorates_the_function() -> None:
    snippet = '@staticmethod\n@torch.amp.custom_bwd(device_type="cpu")\ndef backward(ctx, g):\n    ...\n'
    out = paste(FUNCTION, 12, snippet)
    assert (
        '    @staticmethod\n    @torch.amp.custom_bwd(device_type="cpu")\n    def backward(ctx, g):\n' in out
    )
    assert out.count("def backward") == 1
    compile(out, "fn.py", "exec")


def test_a_with_block_rewriting_the_line_replaces_it() -> None:
    text = "def f(a, b):\n    y = (a @ b).sum()\n    return y\n"
    snippet = (
        'with torch.autocast(device_type="cpu", enabled=False):\n    y = (a.float() @ b.float()).sum()\n'
    )
    out = paste(text, 2, snippet)
    assert out == (
        "def f(a, b):\n"
        '    with torch.autocast(device_type="cpu", enabled=False):\n'
        "        y = (a.float() @ b.float()).sum()\n"
        "    return y\n"
    )
