"""`dtype-doctor env`: the facts about this machine that decide which precisions can work."""

from __future__ import annotations

import argparse

from . import EXIT_FINDINGS, EXIT_OK
from ._output import add_output_options, emit

HELP = "hardware and library facts: bf16/fp16 support, autocast, apex, OneFlow, flash-attn..."
DESCRIPTION = (
    "Report torch, CUDA, cuDNN and driver versions; each GPU's compute capability and whether bf16 "
    "is native or only emulated; the CPU's fp16/bf16 support; autocast per device; and the libraries "
    "that change precision behind your back (NVIDIA apex and the unrelated PyPI apex, OneFlow/OneDiff, "
    "xformers, flash-attn, bitsandbytes, DeepSpeed, accelerate's mixed precision), each hazard with "
    "its fix. Nothing missing makes it fail: what cannot be known is reported as unknown."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "exit codes: 0 nothing to worry about, 1 hazards found"
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    from ..env.facts import environment

    report = environment()
    emit(report, args)
    problems = [f for f in report.findings if f.severity.value != "info"]
    return EXIT_FINDINGS if problems else EXIT_OK
