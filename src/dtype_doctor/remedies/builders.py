"""Edit builders: a remedy's snippet written from the evidence, where a format string cannot say it.

Each builder takes the names a producer gave (a `Names` mapping) and returns the snippet, or None
when the evidence does not make one. `FixTemplate.build` names one of `BUILDERS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .names import module_ref
from .places import BIRTH, INPUT, MODEL

MANY = 3  # more modules than this: one loop over named_modules() instead of a line each


def convert_modules(names: Mapping[str, Any]) -> str | None:
    """`model.a.to(torch.float16)` for each module path ("" is the model itself), a loop for many."""
    model, paths, dt = names["model"], list(names["paths"]), f"torch.{names['want']}"
    if paths == [""]:
        return f"{model}.to({dt})"
    if len(paths) <= MANY:
        return "\n".join(f"{module_ref(p, model)}.to({dt})" for p in paths)
    leaves = sorted({p.rsplit(".", 1)[-1] for p in paths})
    if all(not leaf.isdigit() for leaf in leaves) and len(leaves) <= 4:
        test = f"name.endswith({tuple('.' + leaf for leaf in leaves)!r})"
    else:
        test = f"name in {sorted(paths)!r}"
    return f"for name, module in {model}.named_modules():\n    if {test}:\n        module.to({dt})"


def cast_held(names: Mapping[str, Any]) -> str | None:
    """Each parameter or buffer (`held`: expressions of the paths the model really has) cast once."""
    return "\n".join(f"{p}.data = {p}.data.to(torch.{names['want']})" for p in names["held"]) or None


def cast_passed(names: Mapping[str, Any]) -> str | None:
    """The user's variables cast on their own line before the call that passes them."""
    passed, dt = list(names["passed"]), f"torch.{names['want']}"
    if len(passed) == 1:
        return f"{passed[0]} = {passed[0]}.to({dt})"
    return f"{', '.join(passed)} = {', '.join(f'{n}.to({dt})' for n in passed)}" if passed else None


def keep_on_convert(names: Mapping[str, Any]) -> str:
    """Cast the float32 model but the module at `path`, then cast at that module's border."""
    path, dtype, model = str(names["path"]), names["want"], names.get("model") or "model"
    return (
        "from dtype_doctor.repair.fix import convert\n"
        "from dtype_doctor.numerics import keep_in_fp32\n"
        f"# from the float32 model: cast everything but {path!r}, then cast at its border\n"
        f"convert({model}, torch.{dtype}, keep_fp32=[{'^' + re.escape(path) + '$'!r}])\n"
        f"keep_in_fp32({model}, [{path!r}])"
    )


def keep_module(names: Mapping[str, Any]) -> str | None:
    """The module the finding names kept in float32 by dtype_doctor's own helper, which casts its
    inputs up and its outputs back at its border (None: no module, or the whole model)."""
    module = names.get("module")
    if not isinstance(module, str) or module in ("", "<root>"):
        return None
    model = names.get("model") or "model"
    return f"from dtype_doctor.numerics import keep_in_fp32\nkeep_in_fp32({model}, [{module!r}])"


def master_weights(names: Mapping[str, Any]) -> str:
    """The model the optimizer trains made float32 before the user's own statement that builds the
    optimizer (`built`, kept as written: its class, its arguments), its forward run under autocast in
    the dtype it computed in (`compute`): what it returns, and the inputs it takes, stay as they were."""
    model, compute = names["model"], names.get("compute") or "float16"
    return (
        f"{model}.float()  # in place, float32 master weights: {names['optimizer']}'s state and updates in float32\n"
        f'{model}.forward = torch.autocast("{names.get("device") or "cuda"}", dtype=torch.{compute})({model}.forward)'
        f"  # computed in {compute} as before\n" + str(names["built"])
    )


BUILDERS: dict[str, Callable[[Mapping[str, Any]], str | None]] = {
    "convert_modules": convert_modules,
    "cast_held": cast_held,
    "cast_passed": cast_passed,
    "keep_on_convert": keep_on_convert,
    "master_weights": master_weights,
    "keep_module": keep_module,
}

# the kind of place (remedies.places) each builder's snippet is pasted at: where the names it reads exist
PLACES: dict[str, str] = {
    "convert_modules": MODEL,
    "cast_held": MODEL,
    "cast_passed": INPUT,
    "keep_on_convert": MODEL,
    "keep_module": MODEL,
    "master_weights": BIRTH,  # the optimizer's: the statement that builds it
}
