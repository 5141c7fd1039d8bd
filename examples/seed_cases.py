"""The five real cases this project exists for (OneDiff, xDiT, OneTrainer, CogVLM, InternLM-XComposer), live on CPU with real diffusers/transformers models (random weights).

Each case function reproduces the user's bug and lets dtype-doctor diagnose it; the fix shown is the
tool's own first fix, with what its replay of the failing call gave (passes or not, the error against
float32): nothing here is written by hand. It returns a `CaseResult`; `demo.py` prints.
The OneDiff and xDiT cases need OneFlow and NVIDIA apex on a GPU: their torch face is reproduced
where there is one, and their real error texts are explained together with the environment check.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

import dtype_doctor as dd
from dtype_doctor.processors import present
from dtype_doctor.report import Fix, Report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tiny models live with the tests
import tiny_models

logging.getLogger("diffusers").setLevel(logging.ERROR)
logging.getLogger("transformers").setLevel(logging.ERROR)

LOGS = Path(__file__).parent / "logs"
H = torch.float16


@dataclass
class CaseResult:
    name: str
    user_error: str  # what PyTorch told the user (or "no error")
    reports: list[tuple[str, Report]] = field(default_factory=list)  # (how it was found, report)
    facts: str = ""  # what the case measured beside the reports (the environment)

    def first_fix(self) -> tuple[int, Fix] | None:
        """(its number, the fix) shown for the first finding of the first report that has fixes: the
        first fix its replay verified, else fix 1 (with why it was not run or what it gave)."""
        for _, report in self.reports:
            findings = present(report).findings
            fixes = findings[0].fixes if findings else []
            if fixes:
                return next(((i, f) for i, f in enumerate(fixes, 1) if f.verified), (1, fixes[0]))
        return None


def _catch(fn: Callable[[], object]) -> str:
    try:
        fn()
    except Exception as exc:  # the user's own error, shown as they saw it
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return "no error"


def _watch_live(
    result: CaseResult, model: torch.nn.Module, run: Callable[[], object], how: str = "watch"
) -> None:
    """Run the user's code under watch: record what PyTorch said and what dtype-doctor found.

    The error leaves the watched block, as in the user's script: watch then replays the failing call
    with each fix applied and marks the fixes it verified."""
    session = dd.watch(model=model)
    result.user_error = _catch(lambda: _run_in(session, run))
    result.reports.append((how, session.report))


def _run_in(session: dd.Session, run: Callable[[], object]) -> None:
    with session:
        run()


def onediff() -> CaseResult:
    """A model already .half() run under torch.autocast of the other dtype (OneFlow: InferDataType)."""
    unet = tiny_models.unet().eval().half()
    sample = torch.randn(1, 4, 16, 16, dtype=H)
    ehs = torch.randn(1, 5, 32, dtype=H)

    def broken():
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
            unet(sample, 3, encoder_hidden_states=ehs)

    result = CaseResult("OneDiff: fp16 model under a second precision manager (torch.autocast)", "")
    _watch_live(result, unet, broken, how="watch (torch face of the case, live)")
    result.reports.append(
        ("explain examples/logs/onediff.log", dd.explain((LOGS / "onediff.log").read_text()))
    )
    return result


def xdit() -> CaseResult:
    """NVIDIA apex in the environment swaps its fused norms in (xfuser): explained from the real text."""
    result = CaseResult(
        "xDiT: NVIDIA apex kernels disagree with the model's dtypes",
        "RuntimeError: expected scalar type Float but found Half (in apex FusedRMSNorm)",
    )
    result.reports.append(("explain examples/logs/xdit.log", dd.explain((LOGS / "xdit.log").read_text())))
    env = dd.environment()
    apex = env.meta.get("env", {}).get("libraries", {}).get("apex", {})
    state = f"apex {apex.get('version')} is installed" if apex.get("installed") else "apex is not installed"
    result.facts = f"dtype-doctor env on this machine: {state}"
    return result


def onetrainer() -> CaseResult:
    """An fp32 latent_mask (torch.ones without dtype=) concatenated into an fp16 UNet's input."""
    unet = tiny_models.unet(in_channels=5).eval().half()
    latents = torch.randn(1, 4, 16, 16, dtype=H)
    ehs = torch.randn(1, 5, 32, dtype=H)

    def forward():
        latent_mask = torch.ones(1, 1, 16, 16)  # the bug: a default-dtype (float32) tensor
        with torch.no_grad():
            return unet(torch.cat([latents, latent_mask], dim=1), 3, encoder_hidden_states=ehs).sample

    result = CaseResult("OneTrainer: fp32 latent_mask leaks into an fp16 UNet", "")
    _watch_live(result, unet, forward)
    return result


def cogvlm() -> CaseResult:
    """A half-converted run where the weights are fp16 but the biases stayed fp32."""
    vit = dict(
        image_size=32, num_channels=3, num_hidden_layers=2, num_attention_heads=4, add_pooling_layer=False
    )
    model = tiny_models.vit(**vit).eval()
    for name, p in model.named_parameters():
        if not name.endswith("bias"):
            p.data = p.data.half()
    pixels = torch.randn(1, 3, 32, 32)

    def forward(model):
        with torch.no_grad():
            return model(pixel_values=pixels.half()).last_hidden_state

    result = CaseResult("CogVLM: fp16 weights with fp32 biases", "")
    _watch_live(result, model, lambda: forward(model))
    result.reports.append(("audit (before running)", dd.audit(model)))
    return result


def internlm_xcomposer() -> CaseResult:
    """fp32 vision features fed to a language model loaded in float16."""
    vision = tiny_models.clip_vision(image_size=32, num_attention_heads=4).eval()
    llm_config = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_key_value_heads=4)
    llm = tiny_models.llama(head=False, seed=1, **llm_config).eval().half()  # torch_dtype=torch.float16
    image = torch.randn(1, 3, 32, 32)

    def chat():
        with torch.no_grad():
            image_embeds = vision(pixel_values=image).last_hidden_state  # float32: the image stays fp32
            return llm(inputs_embeds=image_embeds).last_hidden_state

    result = CaseResult("InternLM-XComposer: fp32 image features into an fp16 language model", "")
    _watch_live(result, llm, chat)
    return result


CASES: tuple[Callable[[], CaseResult], ...] = (onediff, xdit, onetrainer, cogvlm, internlm_xcomposer)
