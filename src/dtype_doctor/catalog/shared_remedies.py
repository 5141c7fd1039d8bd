"""Remedies a producer makes at a cause it found, for whichever family the finding is.

A family's own fixes are in its `Family.fixes`; these are the edits at the root of any dtype
mismatch (where the odd tensor, parameter, attribute or module was born, what the caller passes)
and numerics' keep-in-float32 remedies. Producers give `remedies.make` one of them (or a tuple of
alternatives, best first: the first whose `needs` the evidence meets) and the evidence: names in
the user's code, the dtype wanted (`want`, e.g. `float16`), and the file:line the snippet goes to.
Data only.
"""

from __future__ import annotations

from .model import FixTemplate

CONFIRM = FixTemplate("Confirm it: run the code under dtype-doctor", "{command}", needs=("command",))

CAST_AT_BIRTH = FixTemplate(
    "Cast `{name}` to {want} where it is made ({file}:{line})",
    "{name} = {name}.to(torch.{want})",
    "every finding of this cause starts from that tensor",
    needs=("name", "want", "file"),
    language="python",
)

MAKE_AT_BIRTH = FixTemplate(
    "Make {what} in {want} where it is born ({file}:{line})",
    "{made}",
    "every finding of this cause starts from the tensor this line makes; nothing after it needs a cast",
    needs=("made", "want", "file"),
    language="python",
)

CHOOSE_DTYPE = FixTemplate(
    "Choose {want} where the dtype is chosen ({file}:{line}): `{tensor}` is {have}, not a compute dtype",
    "{made}",
    "everything made in this dtype (a cache, a buffer) is born {have}; the values written into it are {want}",
    needs=("made", "want", "file"),
    language="python",
)

CAST_AT_WRITE = FixTemplate(
    "Cast the written values to the dtype of `{dest}` where they are written ({file}:{line})",
    "{made}",
    "autocast made them {have} by design and leaves `{dest}` alone: the seam is the write; read off the "
    "destination, the cast holds with autocast on or off",
    needs=("made", "dest", "file"),
    language="python",
)

WIDEN_FOR_NUMPY = FixTemplate(
    "Convert `{name}` to float32 where it goes to NumPy, which has no {dtype} ({file}:{line})",
    "{made}",
    "float32 holds every {dtype} value exactly: nothing is lost, and the model keeps the dtype you chose",
    needs=("made", "dtype", "file"),
    language="python",
)

CAST_AT_READ = FixTemplate(
    "Cast `{name}` where {method} reads it ({file}:{line}), to the dtype of `{like}`",
    "{made}",
    "the module is shared by models of different dtypes: one dtype held for all breaks one of them; "
    "cast where it is read, each call gets its own",
    needs=("made", "name", "like", "file"),
    language="python",
)

REGISTER_BUFFER = FixTemplate(
    "Register `{name}` as a buffer where it is set ({file}:{line}), so that the model's .to()/.half() convert it",
    'self.register_buffer("{name}", {value}, persistent=False)',
    "a plain tensor attribute is not converted by module-wide casts; a buffer is",
    needs=("name", "value", "file"),
    language="python",
)

CONVERT_ISLAND = FixTemplate(
    "Convert {what} to {want} like the rest of the model",
    why="the {have} module is the odd one out: its input is already {want}, as are the models around "
    "it; casting the activation instead fails at the next layer",
    needs=("model", "paths", "want"),
    build="convert_modules",
    language="python",
)

CONVERT_PARTLY = FixTemplate(
    "Convert the whole model `{model}` to {want} ({file}:{line}): only {converted} is {want}, the rest {have}",
    why="the model is only partly converted: casting the odd tensor that surfaced first fails at the next "
    "layer still in {have}; one module-wide cast accounts for every odd parameter",
    needs=("model", "paths", "want", "file"),
    build="convert_modules",
    language="python",
)

MAKE_IN_DTYPE = FixTemplate(
    "Make it in {want} where it is made ({file}:{line})",
    "{made}",
    "the module then never exists in the wrong dtype",
    needs=("made", "want", "file"),
    language="python",
)

CAST_PASSED = FixTemplate(
    "Cast what you pass to `{model}` ({file}:{line}) to {want}: {passed:code}",
    why="`{model}` runs in {want}; these arguments arrive in another dtype",
    needs=("passed", "model", "want"),
    build="cast_passed",
    language="python",
)

_HELD_WHY = "made in another dtype: {born:semi}; the rest runs in {want}"
CAST_HELD = (
    FixTemplate(
        "Cast {held:code} to {want} once, after the model is built and before your call ({file}:{line})",
        why=_HELD_WHY,
        needs=("held", "want", "file"),
        build="cast_held",
        language="python",
    ),
    FixTemplate(
        "Cast {held:code} to {want} once, after the model is built and before the model is called",
        why=_HELD_WHY,
        needs=("held", "want"),
        build="cast_held",
        language="python",
    ),
)

_KEEP = "from dtype_doctor.numerics import keep_in_fp32\nkeep_in_fp32({model}, {keep!r})"
KEEP_SEARCHED = (
    FixTemplate("Keep {keep!s} in float32 (searched and re-run: the forward is then finite)", _KEEP,
                needs=("keep", "finite")),
    FixTemplate("Keep {keep!s} in float32 (searched and re-run: not enough on its own)", _KEEP, needs=("keep",)),
)  # fmt: skip

_KEEP_ONE = "from dtype_doctor.numerics import keep_in_fp32\nkeep_in_fp32({model}, [{path!r}])"
_KEEP_ONE_WHY = (
    "The module computes in float32 on its inputs cast up; its output is cast back to the "
    "dtype it came in, so the rest of the model keeps its speed and memory."
)
KEEP_MODULE = (
    FixTemplate(
        "Keep '{path}' in float32, casting at its border (re-run with it: error vs float32 "
        "{before:.3g} → {after:.2g})",
        _KEEP_ONE,
        _KEEP_ONE_WHY,
        needs=("path", "before", "after"),
    ),
    FixTemplate(
        "Keep '{path}' in float32, casting at its border (not re-run)",
        _KEEP_ONE,
        _KEEP_ONE_WHY,
        needs=("path",),
    ),
)

_OVERFLOWED = (
    "Keep {where} in float32 when casting from the float32 weights, or rescale {named} below {limit}: "
    "cast to {want}, the parameter is already non-finite"
)
KEEP_OVERFLOWED = (
    FixTemplate(_OVERFLOWED, needs=("path", "want"), build="keep_on_convert"),
    FixTemplate(
        _OVERFLOWED, "model = model.float()  # its float32 weights do not fit {want}", needs=("want",)
    ),
)
