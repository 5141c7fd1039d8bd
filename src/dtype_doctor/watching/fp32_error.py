"""The output error vs float32 of a run that passed, for `run --diff`'s re-run of the patched copy.

Asked for by the environment variable below (set only by the re-run: a normal watch never pays for
it). The last call the program made of its largest model is replayed on deep copies twice: as it was made
(its dtypes, its autocast) and all in float32; the report's meta says the max relative error of the
first output float32 makes non-zero, or why it was not measured. The user's objects are not touched.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from ..verifying.isolation import generators, restore_generators, sealed
from .verify import (
    MAX_ELEMENTS,
    Call,
    floats_in,
    max_relative_error,
    on_meta,
    reference,
    run_call,
    size_of,
)

ENV = "DTYPE_DOCTOR_ERROR_VS_FP32"


def wanted() -> bool:
    return os.environ.get(ENV) == "1"


def measure(session: Any) -> str:
    """'max rel. error 2e-03 vs fp32 (...)' or 'not measured (why)'; a measured error is also put in
    the report's meta as a number (`error_vs_fp32_value`), which the verifier judges against its
    threshold (verifying/backends/patched.py)."""
    if not session.calls:
        return "not measured (no model call was watched)"
    call = Call(*max(session.calls.values(), key=lambda c: size_of(c[0])))  # the model, not a helper layer
    what = f"the last call of {type(call.module).__name__}, replayed on copies"
    if on_meta(call.module):
        return "not measured (a meta model has no values)"
    if size_of(call.module) > MAX_ELEMENTS:
        return "not measured (the model is too large to copy for a replay)"
    try:
        with sealed([call.module]):  # the program's generators and hooks as they were
            state = generators()
            module, args, kwargs = copy.deepcopy((call.module, call.args, call.kwargs))
            got = floats_in(run_call(call, module, args, kwargs, []))
            restore_generators(
                state
            )  # float32 draws what the call drew (torch, random, NumPy): the same inputs
            ref = reference(call)
    except Exception as exc:
        return f"not measured ({what} raised {type(exc).__name__})"
    if ref is None:
        return f"not measured ({what} does not run in float32)"
    err = max_relative_error(got, ref)
    if err is None:
        return f"not measured ({what}: no non-zero float output to compare)"
    if err != err or err == float("inf"):
        return f"the output is not finite ({what})"
    session.report.meta["error_vs_fp32_value"] = err
    return f"max rel. error {err:.0e} vs fp32 ({what})"
