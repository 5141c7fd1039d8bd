"""Origins reach where a dtype was chosen when that is not a tensor's birth, and the first fix edits
there: a second encoder left in the default dtype beside its converted twin (named by the paths of
the models the script calls), a cache allocated in the dtype read off a weight that quantization made
int8, values autocast made half written into an fp32 tensor, and a bf16 tensor handed to NumPy.
Each script is run under `run --write`; what the report says is asserted, and the patched script runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from cli_process import python  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}

TWIN_ENCODERS = """\
import torch
from torch import nn
from transformers import BertConfig, BertModel

torch.manual_seed(0)
cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
query_encoder = BertModel(cfg).half().eval()
doc_encoder = BertModel(cfg).eval()
scorer = nn.Sequential(nn.Linear(32, 1)).half()


def pair(ids):
    states = [enc(ids).last_hidden_state[:, 0] for enc in (query_encoder, doc_encoder)]
    return torch.cat(states, dim=-1)


with torch.no_grad():
    print(scorer(pair(torch.randint(0, 50, (2, 5)))).shape)
"""

QUANTIZED_CACHE = """\
import torch
from torch import nn


class Int8Proj(nn.Module):
    def __init__(self, lin):
        super().__init__()
        scale = lin.weight.abs().amax(dim=1, keepdim=True) / 127
        self.register_buffer("weight", (lin.weight / scale).round().to(torch.int8))
        self.register_buffer("scale", scale)

    def forward(self, x):
        return (x @ self.weight.to(x.dtype).t()) * self.scale.t()


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def allocate(self, steps):
        store_dtype = self.proj.weight.dtype
        self.register_buffer("memory", torch.zeros(steps, 8, dtype=store_dtype))

    def forward(self, x, step):
        self.memory[torch.tensor([step])] = self.proj(x)
        return self.memory.sum()


dec = Decoder().to(torch.bfloat16)
dec.proj = Int8Proj(dec.proj)
dec.allocate(4)
print(dec(torch.randn(1, 8, dtype=torch.bfloat16), 0))
"""

AUTOCAST_WRITE = """\
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.words = nn.Embedding(20, 8)
        self.image = nn.Linear(4, 8)

    def forward(self, ids, feats, slots):
        h = self.words(ids)
        h[slots] = self.image(feats)
        return h.mean()


net = Tagger()
with torch.autocast("cpu", dtype=torch.bfloat16):
    print(net(torch.randint(0, 20, (6,)), torch.randn(2, 4), torch.tensor([1, 3])))
"""

BF16_TO_NUMPY = """\
import torch
from torch import nn

net = nn.Sequential(nn.Linear(6, 4), nn.Softmax(-1)).to(torch.bfloat16)
with torch.no_grad():
    probs = net(torch.randn(3, 6, dtype=torch.bfloat16))
table = probs[0].numpy()
print(table.sum())
"""


def _write(tmp_path: Path, name: str, text: str) -> tuple[list[dict], str, str]:
    """`run --write --json` on the script: the findings, the script after, what was said."""
    script = tmp_path / name
    script.write_text(text)
    cmd = [
        sys.executable,
        "-m",
        "dtype_doctor",
        "run",
        "--write",
        "--no-backup",
        "--no-color",
        "--json",
        "r.json",
        name,
    ]
    proc = python(cmd, cwd=tmp_path, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    findings = json.loads((tmp_path / "r.json").read_text())["findings"]
    after = script.read_text()
    ran = python([sys.executable, name], cwd=tmp_path, env=ENV, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]  # the patched script runs
    return findings, after, " ".join(proc.stderr.split())


def _cure(finding: dict) -> dict:
    """The first fix: the experiment's cure, its edits those --write wrote (shown as a diff)."""
    first = finding["fixes"][0]
    assert first["verified"] is True and first["edits"] and first["diff"], first
    return first


def _lines(origin: dict) -> set[int]:
    todo, out = [origin], set()
    while todo:
        o = todo.pop()
        out.add(o.get("line"))
        todo.extend(o.get("chain") or [])
    return out


def test_a_second_encoder_left_in_the_default_dtype_is_made_right_where_it_is_built(tmp_path: Path) -> None:
    findings, after, _ = _write(tmp_path, "enc.py", TWIN_ENCODERS)
    failed = next(f for f in findings if f["severity"] == "error")
    assert failed["location"]["module"] == "0"  # the scorer's own path, not `Sequential.0`
    assert failed["data"]["island"]["built"] == "enc.py:8"
    assert "doc_encoder = BertModel(cfg).eval().to(torch.float16)" in after.splitlines()
    promoted = next(f for f in findings if f["code"] == "silent-promotion")
    assert "+doc_encoder = BertModel(cfg).eval().to(torch.float16)" in _cure(promoted)["diff"]
    # the UNet-side replay cannot show another model's fix: it says so, never "fails"
    other = [x for x in failed["fixes"] if "doc_encoder" in x["snippet"]]
    assert other and all("is not a model the replayed call runs" in x["verification"] for x in other)


def test_a_cache_allocated_in_an_int8_weights_dtype_reads_the_scales_dtype(tmp_path: Path) -> None:
    findings, after, _ = _write(tmp_path, "cache.py", QUANTIZED_CACHE)
    (f,) = findings
    dest = next(o for o in f["operands"] if o["role"] == "destination")
    assert dest["dtype"] == "int8" and 22 in _lines(dest["origin"])  # where the dtype was read
    assert f["data"]["intended"]["dtype"] == "bfloat16"
    first = _cure(f)
    assert first["edits"][0]["location"]["row"] == 22
    assert "+        store_dtype = self.proj.scale.dtype" in first["diff"]
    assert not any(
        "value.to(cache.dtype)" in x["snippet"] or ".to(torch.int8)" in x["snippet"] for x in f["fixes"]
    )
    assert "        store_dtype = self.proj.scale.dtype" in after.splitlines()


def test_values_autocast_made_half_are_cast_where_they_are_written(tmp_path: Path) -> None:
    findings, after, _ = _write(tmp_path, "amp.py", AUTOCAST_WRITE)
    (f,) = findings
    written = next(o for o in f["operands"] if o["dtype"] == "bfloat16")
    assert 18 in _lines(written["origin"])  # the `with torch.autocast(...)` line
    assert "h[slots] = self.image(feats" in _cure(f)["diff"]
    # run --write keeps the first edit set whose re-run passes, earliest birth first: the autocast
    # region's float32 computation of the written values, or the cast at the write
    lines = after.splitlines()
    assert "        h[slots] = self.image(feats).to(h.dtype)" in lines or (
        "            h[slots] = self.image(feats.float())" in lines and "enabled=False" in after
    )
    assert (
        "Embedding(20, 8)" in after and "bfloat16)\n" not in after.split("net = Tagger()")[0]
    )  # model not lowered


def test_a_bf16_tensor_handed_to_numpy_is_widened_there_never_with_cuda(tmp_path: Path) -> None:
    findings, after, _ = _write(tmp_path, "tonp.py", BF16_TO_NUMPY)
    (f,) = findings
    (op,) = f["operands"]
    assert (op["name"], op["dtype"]) == ("probs", "bfloat16") and 4 in _lines(op["origin"])  # the .to(bf16)
    assert "+table = probs[0].float().numpy()" in _cure(f)["diff"]
    assert not any("cuda" in x["snippet"].lower() for x in f["fixes"])
    assert "table = probs[0].float().numpy()" in after.splitlines()
