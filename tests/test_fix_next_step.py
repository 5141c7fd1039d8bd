"""A first fix must hold past the call it was seen to fail at (issue 29, item 4): the next
iteration of a loop, the next layer of the model. Each case runs `dtype-doctor run` on a small
program of our own, pastes the first fix of the first finding where it says (the package's paste
rule, as a user reads "at FILE:LINE"), and runs the patched program with plain python."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

from cli_process import python  # type: ignore[import-not-found]
from dtype_doctor.editing.paste import paste

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}


def _first_fix(tmp_path: Path, name: str, source: str) -> tuple[dict, dict]:
    """(the first error, else warning, finding; its first fix with code), from `run --json`."""
    (tmp_path / name).write_text(textwrap.dedent(source))
    cmd = [sys.executable, "-m", "dtype_doctor", "run", "--json", "out.json", name]
    python(cmd, cwd=tmp_path, env=ENV, timeout=600)
    findings = json.loads((tmp_path / "out.json").read_text())["findings"]
    finding = next(f for sev in ("error", "warning") for f in findings if f["severity"] == sev)
    fix = next(x for x in finding["fixes"] if x["snippet"] and not x["snippet"].lstrip().startswith("#"))
    return finding, fix


def _runs_pasted(tmp_path: Path, name: str, fix: dict) -> None:
    """The fix pasted at the place it states; the patched program runs to its end."""
    assert fix["file"] == name and fix["line"], fix
    patched = tmp_path / f"patched_{name}"
    patched.write_text(paste((tmp_path / name).read_text(), fix["line"], fix["snippet"]))
    proc = python([sys.executable, patched.name], cwd=tmp_path, env=ENV, timeout=300)
    assert proc.returncode == 0, (fix, patched.read_text(), proc.stderr[-1500:])


LOOP = """\
    import torch
    from torch import nn


    class Pool(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.norm = nn.LayerNorm(4)

        def forward(self, feats, groups):
            h = self.proj(feats)
            for _ in range(2):
                msg = self.proj(feats)
                h = h.new_zeros(h.shape).index_add_(0, groups, msg)
                h = self.norm(h.float())
            return h


    pool = Pool()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = pool(torch.randn(3, 4), torch.tensor([0, 1, 0]))
    print(out.dtype)
"""


def test_a_destination_whose_dtype_changes_in_a_loop_is_matched_by_its_own_dtype(tmp_path: Path) -> None:
    # iteration 1 writes bfloat16 into bfloat16; iteration 2 into the float32 the norm returned: a
    # cast to the dtype seen at the failure (float32) would fail at iteration 1
    finding, fix = _first_fix(tmp_path, "pool.py", LOOP)
    assert finding["code"] == "index-put-dtype-mismatch"
    assert fix["snippet"] == "msg = msg.to(h.dtype)" and fix["line"] == 15, fix
    assert "inside the replayed call" in fix["verification"]  # pasted in forward: not replayed at the call
    _runs_pasted(tmp_path, "pool.py", fix)


def _env_with_models() -> dict[str, str]:
    return {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}


def _first_fix_of(tmp_path: Path, name: str, source: str, code: str | None = None) -> tuple[dict, dict]:
    """Like `_first_fix`, with tests/tiny_models.py importable (real library models)."""
    (tmp_path / name).write_text(textwrap.dedent(source))
    cmd = [sys.executable, "-m", "dtype_doctor", "run", "--json", "out.json", name]
    python(cmd, cwd=tmp_path, env=_env_with_models(), timeout=600)
    findings = json.loads((tmp_path / "out.json").read_text())["findings"]
    finding = next(f for f in findings if f["severity"] == "error" and (code is None or f["code"] == code))
    fix = next(x for x in finding["fixes"] if x["snippet"] and not x["snippet"].lstrip().startswith("#"))
    return finding, fix


def _runs_pasted_with_models(tmp_path: Path, name: str, fix: dict) -> None:
    assert fix["file"] == name and fix["line"], fix
    patched = tmp_path / f"patched_{name}"
    patched.write_text(paste((tmp_path / name).read_text(), fix["line"], fix["snippet"]))
    proc = python([sys.executable, patched.name], cwd=tmp_path, env=_env_with_models(), timeout=300)
    assert proc.returncode == 0, (fix, patched.read_text(), proc.stderr[-1500:])


PARTLY = """\
    import torch
    from tiny_models import vit


    def cast_inputs(fn):
        def run(pixels):
            return fn(pixel_values=pixels.half()).last_hidden_state
        return run


    model = vit(add_pooling_layer=False)
    model.embeddings.half()  # only the embeddings converted
    encode = cast_inputs(model)
    with torch.no_grad():
        out = encode(torch.randn(1, 3, 16, 16))
    print(out.dtype)
"""


def test_a_partly_converted_model_is_converted_whole_not_one_tensor_at_a_time(tmp_path: Path) -> None:
    # a transformers ViT whose embeddings alone were made float16, called through a wrapper that casts
    # the pixels: the first float32 layer fails, and so would every one after it
    finding, fix = _first_fix_of(tmp_path, "encode.py", PARTLY)
    assert fix["snippet"] == "model.to(torch.float16)", fix  # the outer name, not the wrapper's `fn`
    assert fix["line"] == 13 and fix["verified"] is True, fix  # after the partial conversion; replayed whole
    one = next(x for x in finding["fixes"] if ".data = " in x["snippet"])
    assert one["verified"] is False and "same dtype" in one["verification"]  # the next layer still fails
    load = next(x for x in finding["fixes"] if x["snippet"].startswith("model = model.float()"))
    assert load["verified"] is not True and "local there" in load["verification"]  # UnboundLocalError there
    _runs_pasted_with_models(tmp_path, "encode.py", fix)


PROMPTED = """\
    import torch
    from torch import nn
    from tiny_models import gpt2


    class Prompted(nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = gpt2(head=False)
            self.offset = torch.linspace(0, 1, self.lm.config.n_embd)  # a plain attribute: .half() skips it

        def forward(self, ids):
            h = self.lm.wte(ids) + self.offset
            return self.lm(inputs_embeds=h).last_hidden_state


    model = Prompted().half()
    with torch.no_grad():
        print(model(torch.tensor([[1, 2, 3]])).dtype)
"""


def test_a_failure_after_a_promotion_is_fixed_at_the_promoting_attribute(tmp_path: Path) -> None:
    # the float32 attribute promotes the embeddings (a warning); GPT-2's first float16 norm then fails:
    # the failure's root is the attribute's birth, and its first fix with code is made there
    finding, fix = _first_fix_of(tmp_path, "prompted.py", PROMPTED)
    assert "`offset` (prompted.py:10)" in finding["root_cause"], finding["root_cause"]
    assert fix["snippet"].startswith('self.register_buffer("offset", ') and fix["line"] == 10, fix
    _runs_pasted_with_models(tmp_path, "prompted.py", fix)


def test_a_snippet_rebinding_a_global_inside_a_function_is_seen_to_fail(tmp_path: Path) -> None:
    from dtype_doctor.remedies.scope import unbound_at

    path = tmp_path / "wrap.py"
    path.write_text("def outer(fn):\n    def run(x):\n        return fn(x)\n    return run\n\nmodel = 1\n")
    assert unbound_at(str(path), 2, "model = model.float()") == ("model", "outer")
    assert unbound_at(str(path), 2, "fn = fn.float()") is None  # a parameter: bound there
    assert unbound_at(str(path), 3, "fn = fn.float()") == ("fn", "run")  # the closure's: local if assigned
    assert unbound_at(str(path), 6, "model = model.float()") is None  # the module's own name


KEPT = """\
    import torch
    from torch import nn


    class Lean(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(64, 32)
            self.proj = nn.Linear(32, 32)
            self.head = nn.Linear(32, 64)
            {inside}

        def forward(self, ids):
            return self.head(self.proj(self.embed(ids)))


    model = Lean()
    {outside}
    with torch.no_grad():
        print(model(torch.tensor([[1, 2, 3]])).dtype)
"""


def test_a_part_kept_low_by_the_models_own_constructor_is_not_a_reason_to_lower_the_rest(
    tmp_path: Path,
) -> None:
    convert = "self.embed.to(torch.bfloat16)  # stored in bf16 by design, the rest float32"
    _, fix = _first_fix(tmp_path, "kept.py", KEPT.format(inside=convert, outside=""))
    assert fix["snippet"].startswith("model = model.float()"), fix  # the float32 weights are kept
    _runs_pasted(tmp_path, "kept.py", fix)
    convert = "model.embed.to(torch.bfloat16)  # converted from outside: a partial conversion"
    _, fix = _first_fix(tmp_path, "kept.py", KEPT.format(inside="pass", outside=convert))
    assert fix["snippet"] == "model.to(torch.bfloat16)" and fix["line"] == 19, fix
    _runs_pasted(tmp_path, "kept.py", fix)
