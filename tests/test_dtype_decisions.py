"""Where a tensor's dtype was decided, followed through the cases that used to lose it: a cast that
takes another tensor's dtype (`z.to(cond.dtype)`) is a decision at its own line, even when it changed
nothing, and its fix gives that cast the consumer's dtype; a pipeline object's method that calls one
submodule in a loop and then another is not one repeated call (the second is watched in full); a
spectrum (complex) carries its signal's origin, and float64 data meeting a module's float32 buffer
is the intruder. Every fix shown first is the verified one, and it is executed here."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from cli_process import python  # type: ignore[import-not-found]
from dtype_doctor.editing.fix_edits import apply_json

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
ENV.pop("DTYPE_DOCTOR_BUDGET", None)  # the default budget: the experiment tries the candidates

# a float32 prior, a sampler loop in the denoiser's float16, then a float32 decoder given the latents
# cast to the conditioning's dtype (they already had it): the decoder's first conv fails
BORROWED_CAST = """\
import torch
from torch import nn


class Sampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.prior = nn.Linear(8, 8)
        self.denoiser = nn.Linear(8, 8).half()
        self.decoder = nn.Sequential(nn.Conv2d(2, 32, 3, padding=1), nn.SiLU(), nn.Conv2d(32, 3, 1))

    def __call__(self, cond, steps=3):
        z = self.prior(torch.randn(1, 8))
        for _ in range(steps):
            z = self.denoiser(z.to(cond.dtype)) + cond
        z = z.to(cond.dtype).reshape(1, 2, 2, 2)
        return self.decoder(z)


pipe = Sampler()
print(pipe(torch.randn(1, 8, dtype=torch.float16)).shape)
"""

# float64 audio from NumPy, its spectrum's magnitude through a float32 mel filter bank buffer
SPECTRUM = """\
import numpy as np
import torch
from torch import nn


class MelFrontEnd(nn.Module):
    def __init__(self, n_fft=32, n_mels=6):
        super().__init__()
        self.n_fft = n_fft
        self.register_buffer("fb", torch.rand(n_fft // 2 + 1, n_mels))
        self.register_buffer("window", torch.hann_window(n_fft))
        self.head = nn.Linear(n_mels, 4)

    def forward(self, wave):
        spec = torch.stft(wave, self.n_fft, 8, window=self.window, return_complex=True)
        power = spec.abs().pow(2.0)
        return self.head(torch.matmul(power.transpose(-1, -2), self.fb))


def load(samples):
    return torch.as_tensor(samples)


front = MelFrontEnd()
wave = load(np.random.default_rng(0).normal(size=400))
print(front(wave).shape)
"""


# a helper whose `dtype` parameter defaults to float32, called without it on float64 data
DEFAULTED = """\
import numpy as np
import torch


class Offset:
    def __init__(self, shift, dtype=torch.float32, device="cpu"):
        self.matrix = torch.eye(3, dtype=dtype, device=device)
        self.matrix[:2, 2] = torch.as_tensor(shift)


def recentre(points, shift):
    step = Offset(shift, device=points.device)
    return points @ step.matrix


cloud = torch.from_numpy(np.random.default_rng(0).normal(size=(5, 3)))
print(recentre(cloud, [1.0, -2.0]).mean(0))
"""


# a token-mixing layer of FFTs in a bfloat16 model: torch.fft has no bfloat16 kernel on this device
SPECTRAL_MIXER = """\
import torch
from torch import nn


class FourierMix(nn.Module):
    def forward(self, h):
        return torch.fft.fft(torch.fft.fft(h, dim=-1), dim=-2).real


class Mixer(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.inp = nn.Linear(width, width)
        self.mix = FourierMix()
        self.out = nn.Linear(width, width)

    def forward(self, x):
        return self.out(self.mix(self.inp(x)))


net = Mixer().to(torch.bfloat16)
print(net(torch.randn(2, 8, 16, dtype=torch.bfloat16)).dtype)
"""


def _run(tmp_path: Path, name: str, text: str) -> tuple[dict, str]:
    script = tmp_path / name
    script.write_text(text)
    cmd = [sys.executable, "-m", "dtype_doctor", "run", "--no-color", "--json=report.json", name]
    proc = python(cmd, cwd=tmp_path, env=ENV, timeout=600)
    assert proc.returncode != 0  # the program's own failure, unchanged
    return json.loads((tmp_path / "report.json").read_text()), proc.stderr


def _executes(tmp_path: Path, name: str, text: str, fix: dict) -> None:
    assert fix["verified"] is True, fix
    (tmp_path / name).write_text(apply_json(text, fix["edits"]))
    ran = python([sys.executable, name], cwd=tmp_path, env=ENV, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]


def _error(report: dict, op: str) -> dict:
    return next(f for f in report["findings"] if f["severity"] == "error" and f["location"]["op"] == op)


def test_a_cast_to_another_tensors_dtype_is_the_decision_and_its_fix(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "sampler.py", BORROWED_CAST)
    conv = _error(report, "conv2d")
    latents = next(o for o in conv["operands"] if o["dtype"] == "float16")
    origin = latents["origin"]
    assert (origin["kind"], origin["line"], origin["name"]) == ("cast", 16, "z")
    assert [(c["kind"], c["name"]) for c in origin["chain"]][:1] == [("input", "cond")]
    fix = conv["fixes"][0]
    assert "not to `cond.dtype`" in fix["title"]
    assert [e["content"] for e in fix["edits"]] == ["torch.float32"]
    assert fix["edits"][0]["location"]["row"] == 16
    _executes(tmp_path, "sampler.py", BORROWED_CAST, fix)


def test_a_spectrum_carries_its_signals_origin_and_float64_intrudes(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "mel.py", SPECTRUM)
    mm = _error(report, "matmul")
    assert "it needs float32" in mm["message"]
    wide = next(o for o in mm["operands"] if o["dtype"] == "float64")
    lines = []
    todo = [wide["origin"]]
    while todo:
        o = todo.pop()
        lines.append(o.get("line"))
        todo.extend(o.get("chain", []))
    assert 21 in lines  # `torch.as_tensor(samples)`: where the float64 came in, through the stft
    fix = mm["fixes"][0]
    assert fix["edits"][0]["location"]["row"] == 21
    assert "dtype=torch.float32" in fix["edits"][0]["content"]
    _executes(tmp_path, "mel.py", SPECTRUM, fix)


def test_a_dtype_parameter_left_at_its_default_is_passed_where_it_is_called(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "offset.py", DEFAULTED)
    mm = _error(report, "matmul")
    fix = mm["fixes"][0]
    assert fix["title"].startswith(
        "Pass `dtype=` of the tensor whose device it passes where `Offset` is called (offset.py:12): it was "
        "left at its default, which made the tensor at line 7 float32"
    )
    assert [(e["location"]["row"], e["content"]) for e in fix["edits"]] == [(12, ", dtype=points.dtype")]
    _executes(tmp_path, "offset.py", DEFAULTED, fix)


def test_an_op_the_half_dtype_lacks_is_computed_in_float32_and_cast_back(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "mixer.py", SPECTRAL_MIXER)
    error = next(f for f in report["findings"] if f["severity"] == "error")
    fix = error["fixes"][0]
    assert fix["title"].startswith("Compute `torch.fft.fft` in float32 and cast the result back to `h.dtype`")
    assert [(e["location"]["row"], e["content"]) for e in fix["edits"]] == [
        (7, "(torch.fft.fft(torch.fft.fft(h.float(), dim=-1), dim=-2).real).to(h.dtype)")
    ]
    _executes(tmp_path, "mixer.py", SPECTRAL_MIXER, fix)  # the bfloat16 layer after it runs as before
