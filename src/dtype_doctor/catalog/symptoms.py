"""What `explain` does with text that holds no program message it knows. Data only.

`SYMPTOMS`: descriptions of what a user saw ("loss becomes nan with fp16", "black images",
"the loss scale keeps dropping"), as regexes over the lower-cased normalised text
(`explain.normalize.view`: dtype spellings are canonical, so `fp16` and `half` read `float16`).
The first that matches names the family, with a lower confidence than a message would give and
the command that would confirm it.

`DTYPE_EVIDENCE`: words that make a text about dtypes or precision at all. A text with such
words but no message and no symptom gets the family sharing the most keywords; a text without
any is `unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Symptom:
    code: str
    regex: str
    confirm: str  # the command that would show it happening
    confidence: float = 0.45


NUMERICS = "dtype-doctor run --numerics train.py   # names the first op that produces inf/nan"

_HALF_MODEL = (
    r"(?:\.half\(\)|\.to\((?:torch\.)?(?:float16|bfloat16)\)|torch_dtype=(?:torch\.)?(?:float16|bfloat16)"
    r"|\b(?:float16|bfloat16|half)[ -](?:precision )?(?:model|weights|unet|vae|checkpoint|params|parameters)\b)"
)
SYMPTOMS: tuple[Symptom, ...] = (
    Symptom(
        "fp16-gradient-unscale",
        r"\bunscal\w*\b[^\n]{0,80}?\b(?:float16|half)\b"
        r"|\b(?:float16|half)\b[^\n]{0,30}?\b(?:grad\w*|param\w*|weights?|model)\b[^\n]{0,60}?\b(?:unscal\w*|grad ?scaler|amp\.gradscaler)\b"
        r"|\b(?:grad ?scaler|amp\.gradscaler)\b[^\n]{0,80}?(?:\b(?:float16|half)\b[^\n]{0,30}?\b(?:grad\w*|param\w*|weights?|model)\b|\.half\(\))",
        "dtype-doctor run train.py   # names the float16 parameters GradScaler was given",
    ),
    Symptom(
        "autocast-half-conflict",
        rf"\bautocast\b[^\n]{{0,150}}?{_HALF_MODEL}|{_HALF_MODEL}[^\n]{{0,150}}?\bautocast\b",
        "dtype-doctor run train.py   # shows autocast's dtype against the model's",
    ),
    Symptom(
        "grad-scaler-overflow",
        r"\b(?:loss|grad(?:ient)?) ?scal(?:e|er|ing)\b[^\n]{0,60}?(?:\bdrop|decreas|collaps|minimum|reduc|\bfall|halv"
        r"|\bzero\b|\b0\b|underflow|tiny|vanish|\bdown\b|shrink|smaller|lower)"
        r"|\bminimum (?:loss|grad(?:ient)?) scale|\bskip(?:s|ping|ped)? (?:the |every |all |optimizer )?(?:optimizer )?steps?\b"
        r"|\b(?:gradient|grad) overflow",
        NUMERICS,
    ),
    Symptom(
        "nonfinite-values",
        r"(?<![\w.])-?(?:nan|nans|inf|infinity)(?![\w])|\bnan'?s\b|\bnot a number\b"
        r"|\bblack (?:images?|pictures?|outputs?|frames?|squares?|screens?|results?)\b"
        r"|\b(?:images?|outputs?|pictures?|results?) (?:come out |are |is |turn |become |look )?(?:all |completely |pure )?black\b",
        NUMERICS,
    ),
)

DTYPE_EVIDENCE = (
    r"\b(?:float16|bfloat16|float32|float64|float8\w*|int64|int32|int8|uint8|complex32|dtypes?|precision|amp"
    r"|autocast|scalar ?type|[a-z]{0,12}tensor|half\(\)|\.half|quantiz\w*|[48]-?bit|load_in_[48]bit|cast(?:ing|s)?"
    r"|loss ?scal\w*|grad ?scaler|(?:same|different) devices?)\b"
)

# On a keyword tie, a family named after a library or set-up beats one named after an op: "a 4-bit
# Linear layer" is about quantization more than about nn.Linear.
SETUP_FAMILIES = frozenset(
    {
        "apex-conflict",
        "oneflow-infer-dtype",
        "flash-attention-dtype",
        "quantized-compute-dtype",
        "autocast-half-conflict",
        "optimizer-state-dtype",
        "jit-fuser-half",
        "mps-dtype-unsupported",
        "bf16-unsupported-hardware",
        "cudnn-half-unsupported",
        "device-mismatch",
    }
)

CHECK_COMMAND = "dtype-doctor check model.py:build_model   # runs the model once and names each mismatch"

__all__ = ["CHECK_COMMAND", "DTYPE_EVIDENCE", "NUMERICS", "SETUP_FAMILIES", "SYMPTOMS", "Symptom"]
