"""`compare`: run one model in fp32, fp16, bf16 and under autocast, side by side, on this hardware.

For each precision: does it run (and if not, why), median latency after warm-up with its
spread, throughput, peak memory, and error against the fp32 reference for outputs and, for a
training step, gradients. For each low precision that runs: the modules that lose the most
(attribution.py) and what keeping them in fp32 buys back. Ends with a recommendation, which
makes no speed claim from unstable timings.

Every variant's model comes from the user's factory (seeded, then loaded with the reference
weights, so all variants compute the same function).

precision.py   the precisions and their parsing
runner.py      build, run, time, measure one variant
api.py         `compare()`: drives the runner, reports progress through `on_progress`
findings.py    per-variant findings
recommend.py   the recommendation and its reasons
"""

from __future__ import annotations

from .api import compare
from .precision import DEFAULT_PRECISIONS, Precision, parse_precision
from .progress import OnProgress, ProgressEvent
from .recommend import recommend
from .results import VariantResult

__all__ = [
    "DEFAULT_PRECISIONS",
    "OnProgress",
    "Precision",
    "ProgressEvent",
    "VariantResult",
    "compare",
    "parse_precision",
    "recommend",
]
