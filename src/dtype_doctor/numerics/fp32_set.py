"""The smallest set of modules to keep in float32 for a finite run: a search over numerics' monitor
that applies repair's keep-in-float32 wrappers each round."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..repair.keep import keep_in_fp32
from ..report import Report
from .monitor import NumericsMonitor


def find_fp32_set(
    model: nn.Module, run: Callable[[nn.Module], Any], max_rounds: int = 10
) -> tuple[list[str], Report]:
    """The smallest set of modules to keep in float32 (greedy, leaf first) for a finite `run(model)`.

    Each round runs `run(model)` under a NumericsMonitor (forward only) with the set applied and
    adds the first forward producer; a producer already in the set means its float32 output
    does not fit when cast back, so the module that called it replaces it. Returns (set, report of the last
    round); the set is [] when the run was finite to begin with. The model is left unchanged.
    """
    chosen: list[str] = []
    report = Report(tool="numerics")
    for _ in range(max_rounds):
        handle = keep_in_fp32(model, chosen)
        try:
            monitor = NumericsMonitor(model=model, backward=False, scaler=False, shadow=False).start()
            try:
                with torch.no_grad():
                    run(model)
            finally:
                report = monitor.stop()
        finally:
            handle.remove()
        producer = next((p for p in monitor.producers if p.phase == "forward"), None)
        if producer is None or producer.kind == "input" or producer.path is None:
            return chosen, report
        path = producer.path
        if path in chosen:
            # its float32 output does not fit the dtype it is cast back to: widen to the caller
            if path == "" or producer.caller is None:
                return chosen, report
            path = producer.caller
        if path == "":
            return chosen, report  # the root itself: no smaller set helps, and [""] is the whole model
        chosen = [c for c in chosen if not (c == path or c.startswith(path + ".") or path == "")]
        chosen.append(path)
    return chosen, report
