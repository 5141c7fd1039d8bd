"""Families found by measuring values (numerics): overflow, underflow, GradScaler health. Data only."""

from __future__ import annotations

from ..remedies.places import BIRTH, LOSS, OP
from .model import Family, FixTemplate

_KEEP_FP32 = FixTemplate(
    "Keep {modules} in float32, casting at its border",
    "from dtype_doctor.numerics import keep_in_fp32\nkeep_in_fp32({model}, {modules})",
    "Only these modules run in float32; their inputs are cast up and their outputs back, "
    "so the rest of the model keeps its speed and memory.",
    when=frozenset({"forward"}),
)
_BF16 = FixTemplate(
    "Run in bfloat16 instead of float16: the range, not the precision, is the problem",
    "model.to(torch.bfloat16)  # or torch.autocast(device_type, dtype=torch.bfloat16)",
    "bfloat16 has float32's exponent range (max 3.39e38) with float16's memory; it keeps fewer "
    "mantissa bits, so compare the outputs against a float32 run.",
)

# the op-level checks (numerics/opwatch.py): fixes in the user's statement, keeping float32 precision
_OP_UPCAST = FixTemplate(
    "Compute `{op}` in float32 {at}: upcast {operands}",
    "{upcast}",
    "float32 holds what {dtype_name} cannot here; every tensor operand is upcast, so that the op "
    "runs in float32 rather than mixing dtypes. Cast the result back only where a {dtype_name} "
    "tensor is needed, after this op.",
    when=frozenset({"op-upcast"}),
    place=OP,
)
_OP_LIMIT = FixTemplate(
    "Use {dtype_name}'s own limit instead of {number} {at}: the number becomes inf in {dtype_name}",
    "{limited}",
    "{dtype_name} ends at {limit}; a number beyond it written into a {dtype_name} tensor is inf, and "
    "a softmax over a row of them, or inf - inf, is NaN. torch.finfo of the destination's dtype is "
    "the largest magnitude it holds (a mask's stand-in for -inf), whatever dtype the model runs in.",
    when=frozenset({"op-limit"}),
    place=OP,
)
_OP_SCALE_FIRST = FixTemplate(
    "Divide an operand, not the product, {at}: the same value, and `{op}` no longer passes {limit} "
    "before the division",
    "{scaled}",
    "(a @ b) / c equals (a / c) @ b: dividing after the product comes too late for {dtype_name}, whose "
    "product overflowed first; the result stays in {dtype_name}. If the divided product still "
    "overflows, compute it in float32 (the next fix).",
    when=frozenset({"op-scale"}),
    place=OP,
)
_OP_CLAMP_EXP = FixTemplate(
    "Bound the exponent of `{op}` {at}: its result then stays below {dtype_name}'s {limit}",
    "{clamped}",
    "A result above {limit} cannot come back into {dtype_name}: computed in float32, it meets "
    "{dtype_name} tensors again (a 0-dim float32 scale times a {dtype_name} tensor stays "
    "{dtype_name}) and overflows there. A learned temperature or scale is clamped before its exp "
    "(CLIP clamps its logit scale at 100); choose a tighter bound if the model needs one.",
    when=frozenset({"op-clamp"}),
    place=OP,
)
_OP_FACTORY = FixTemplate(
    "Make the values in float32 {at} and cast only what is computed from them",
    "{factory}",
    "Positions, steps and timesteps must stay exact; the {dtype_name} cast belongs after the "
    "arithmetic that uses them (an embedding's sin/cos, a mask's comparison).",
    when=frozenset({"op-factory"}),
    place=OP,
)
_OP_CALLER = FixTemplate(
    "Pass float32 where the dtype is chosen: this call instead of the one at {caller}; the values, "
    "and what is computed from them, are made in float32",
    "{passed}",
    "The call hands its dtype to the factory and to everything made next to it (a frequency table "
    "cast to it, the angles): in float32 all of it is exact; cast only the finished result where "
    "the model reads it.",
    when=frozenset({"op-caller"}),
)
_OP_UNCAST = FixTemplate(
    "Keep `{receiver}` in float32 {at}: cast after the arithmetic that needs its exact value",
    "{uncast}",
    "The values lose their units digit in {dtype_name}; the model can take them in float32 and "
    "cast what it computes from them.",
    when=frozenset({"op-uncast"}),
    place=OP,
)
_OP_ACCUMULATOR = FixTemplate(
    "Keep the accumulator in float32 where it is made ({born})",
    "{born_fix}",
    "An update smaller than half the spacing of {dtype_name} at the accumulator's size is rounded "
    "away every time; a float32 accumulator (master weights, EMA, running sums, gradients) keeps it. "
    "Gradients are kept in float32 with float32 parameters: their module then casts what it is given "
    "to float32 (or run its forward under torch.autocast to compute in {dtype_name}).",
    when=frozenset({"op-born-fix"}),
    place=BIRTH,
)
_OP_ACCUMULATOR_ANY = FixTemplate(
    "Keep the accumulator `{receiver}` in float32 (made with dtype=torch.float32, or a float32 copy "
    "updated and cast when used)",
    "",
    _OP_ACCUMULATOR.why,
    when=frozenset({"op-absorbed"}),
    unless=frozenset({"op-born-fix"}),
)
# a module's own tensor (a frequency table, a scale) sets an op's dtype, and a module-wide cast made it
# low: kept in float32 through that cast, its values never lose their precision (made by
# numerics/born_keep.py with remedies.make, first among the finding's fixes)
KEEP_THROUGH_CAST = FixTemplate(
    "Keep '{kept}' in float32 through the cast at {born}: its `{tensor}` sets the dtype here and lost "
    "its precision at that cast",
    "from dtype_doctor.numerics import keep_in_fp32\n"
    "keep_in_fp32({model}, {kept_list}, out_dtype=torch.{dtype_name})",
    "keep_in_fp32 before the cast leaves the module's parameters and buffers float32 (a later "
    "`.to()`/`.half()` skips them) and casts its outputs to {dtype_name}: what it computes from "
    "`{tensor}` is exact, and the model downstream keeps its dtype.",
    needs=("kept", "model", "tensor"),
    place=BIRTH,
)
# an overflow in a module of a model that a module-wide cast made float16: the smallest module around
# it whose float32 run is finite (tried on the user's call), kept in float32 through that cast (made by
# watching/keep_through_cast.py with remedies.make, first among the finding's fixes)
KEEP_OVERFLOW_THROUGH_CAST = FixTemplate(
    "Keep '{kept}' in float32 through the cast at {born}: the cast made it {dtype_name}, whose range "
    "its values exceed",
    "from dtype_doctor.numerics import keep_in_fp32\nkeep_in_fp32({model}, {kept_list})",
    "keep_in_fp32 before the cast leaves the module's parameters float32 (a later `.to()`/`.half()` "
    "skips them) and runs it in float32, casting its outputs back: the smallest module around the "
    "overflow whose float32 run on your call was finite, tried from the overflowing one outwards.",
    needs=("kept", "model"),
    place=BIRTH,
)
# the model's own switch for computing a part in float32 (an attribute or config entry named for an
# upcast, False where the overflow ran), set True where the user's code passes it (made by
# watching/upcast_flags.py after a replay with it set)
SET_UPCAST_FLAG = FixTemplate(
    "Set the model's own `{flag}` to True at {at}: it is False there; your call replayed with it "
    "True on the model's modules gave finite outputs",
    "# at {at}, in the call that builds the model:\n#     {flag}=True",
    "The model has a switch for this overflow; the code path ran with it off.",
    needs=("flag", "at"),
)
# a value kept float32 up to its embedding: the cast dropped where it was made, and the input of the
# model's first module that reads what is computed from it cast at the user's line that calls it
# (made by numerics/consumer_cast.py with remedies.make, first among the finding's fixes)
UNCAST_TO_CONSUMER = FixTemplate(
    "Keep `{receiver}` in float32 {at}, and cast what is computed from it to {dtype_name} where "
    "'{module}' reads it ({consumer_at})",
    "{uncast}\n# and at {consumer_at}:\n{consumer_cast}",
    "The exact value reaches the arithmetic that needs it (a timestep's sin/cos, a position's angle) "
    "in float32; only its result, the input of '{module}' whose weights are {dtype_name}, is cast. "
    "Dropping the cast alone would hand '{module}' a float32 input its {dtype_name} weights refuse.",
    needs=("uncast", "consumer_cast"),
    place=OP,
)
_OP_LEVEL = frozenset({"op-level"})  # every op-level finding: module-wide fixes do not apply

NUMERICS_FAMILIES: tuple[Family, ...] = (
    Family(
        code="fp16-overflow",
        title="A float16 value overflowed (|x| > 65504) and became inf/NaN",
        cause=(
            "float16 holds magnitudes up to 65504; a larger result becomes inf, and inf - inf, "
            "0 * inf or a norm over it then gives NaN. {where} produced the first non-finite value "
            "from finite inputs; the modules after it only passed it on."
        ),
        fixes=(
            _OP_LIMIT,
            _OP_SCALE_FIRST,
            _OP_CLAMP_EXP,
            _OP_UPCAST,
            FixTemplate(
                "Run {module} in bfloat16: in float32 it reaches {fp32_absmax}, which bfloat16 holds",
                "model.to(torch.bfloat16)\n# or stay in float16 and keep the module in float32 (below)",
                "The value is finite and within bfloat16's range: only float16's range is too small.",
                when=frozenset({"bf16-fits"}),
            ),
            FixTemplate(
                "Keep the VAE in float32 (diffusers' switch for this)",
                "pipe.vae.to(torch.float32)\n# or let the pipeline upcast it to decode:\npipe.vae.config.force_upcast = True",
                "The SD/SDXL VAE decoder overflows float16 (black or NaN images): diffusers #6815.",
                when=frozenset({"diffusers-vae"}),
            ),
            FixTemplate(
                "Keep '{leaf}' in float32 when loading (transformers' switch for this)",
                '{model_class}._keep_in_fp32_modules = ["{leaf}"]\n'
                "model = {model_class}.from_pretrained(..., dtype=torch.float16)",
                "transformers upcasts the listed modules when loading in float16 (T5 keeps 'wo').",
                when=frozenset({"transformers"}),
                unless=frozenset({"leaf-not-a-name"}),  # 'layers.0': "0" would name every first item
            ),
            _KEEP_FP32,
            FixTemplate(
                "Scale the input down before {module}",
                'model.get_submodule("{module}").register_forward_pre_hook(\n'
                "    lambda mod, args: (args[0] / {scale}, *args[1:])\n"
                ")  # its input reaches {input_absmax}",
                "The input is already large; a smaller input keeps the result inside float16. Only where "
                "what follows does not depend on the scale (a norm right after it).",
                when=frozenset({"large-input"}),
            ),
            FixTemplate(
                "Use GradScaler (dynamic loss scaling), or scale the loss down",
                'scaler = torch.amp.GradScaler("{device}")\nscaler.scale(loss).backward()\n'
                "scaler.step(optimizer)\nscaler.update()",
                "GradScaler skips the step and lowers the scale when gradients overflow.",
                when=frozenset({"backward"}),
            ),
            FixTemplate(
                "Keep {module} in float32 so that its backward runs in float32",
                "from dtype_doctor.numerics import keep_in_fp32\nkeep_in_fp32({model}, {modules})",
                when=frozenset({"backward"}),
            ),
            FixTemplate(
                _BF16.title,
                _BF16.snippet,
                _BF16.why,
                unless=frozenset({"bf16-fits", "bf16-exceeds"}) | _OP_LEVEL,
            ),
        ),
        related=("nonfinite-values", "fp16-headroom", "grad-scaler-overflow"),
        keywords=("inf", "nan", "overflow", "black image", "65504"),
    ),
    Family(
        code="finite-but-wrong",
        title="A low-precision result is finite but far from its float32 value",
        cause=(
            "An op inside the module left the low dtype's range or precision (a sum of squares "
            "above 65504 becomes inf, and rsqrt(inf) = 0 turns it back into finite values), so "
            "nothing is inf/NaN at the module's border but the values are wrong. The module was "
            "re-run in float32 on the same inputs to measure it."
        ),
        fixes=(
            _OP_CALLER,
            _OP_FACTORY,
            _OP_UNCAST,
            _OP_UPCAST,
            _OP_ACCUMULATOR,
            _OP_ACCUMULATOR_ANY,
            _KEEP_FP32,
        ),
        related=("fp16-overflow", "precision-error-high"),
    ),
    Family(
        code="grad-scaler-misuse",
        title="GradScaler is used in an order or a set-up where it does not do its job",
        cause=(
            "GradScaler multiplies the loss by its scale; the gradients stay scaled until "
            "scaler.unscale_(optimizer) (or scaler.step) divides them back, and scaler.update() "
            "adjusts the scale after every step. Clipping before unscale_ clips the scaled "
            "gradients, a step without update() never adapts the scale, and bfloat16 needs no "
            "scaling at all."
        ),
        fixes=(
            FixTemplate(
                "Skip the step for a batch whose loss has no graph (nothing to learn from it)",
                "if {loss}.grad_fn is None:  # made, not computed from the model: no gradients\n    continue",
                "scaler.step needs the inf checks that backward through the parameters records; a loss "
                "made as a constant has none. Or compute the zero loss from the model's output "
                "(pred.sum() * 0.0), which gives every parameter a zero gradient.",
                when=frozenset({"detached-loss"}),
            ),
            FixTemplate(
                "Unscale the gradients before the clip: `{scaler}.unscale_({optimizer})`",
                "{scaler}.unscale_({optimizer})  # the gradients divided back by the scale; step skips its own",
                "the clip then compares the true gradient norm with your threshold",
                when=frozenset({"clip-before-unscale"}),
                needs=("scaler", "optimizer"),
                place=LOSS,
            ),
            FixTemplate(
                "The GradScaler loop, in this order",
                "{scaler}.scale(loss).backward()\n"
                "{scaler}.unscale_({optimizer})  # before anything reads the gradients\n"
                "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
                "{scaler}.step({optimizer})\n"
                "{scaler}.update()\n"
                "{optimizer}.zero_grad()",
            ),
        ),
        severity="warning",
        related=("grad-scaler-overflow", "grad-scaler-collapse"),
    ),
    Family(
        code="fp16-headroom",
        title="Values come close to, or would exceed, float16's 65504 limit",
        cause=(
            "float16 overflows above 65504. These module outputs are within a factor {factor} of it "
            "(or, measured in a wider dtype, above it): a slightly larger input or another step "
            "overflows them to inf."
        ),
        fixes=(
            _KEEP_FP32,
            _BF16,
            FixTemplate(
                "Keep the VAE in float32 (diffusers' switch for this)",
                "pipe.vae.to(torch.float32)",
                when=frozenset({"diffusers-vae"}),
            ),
        ),
        severity="warning",
        related=("fp16-overflow",),
    ),
    Family(
        code="fp16-underflow",
        title="Values too small for float16 are flushed to zero or lose precision",
        cause=(
            "float16's smallest normal magnitude is 6.1e-05 (subnormals reach 6e-08 with fewer bits, "
            "below that a value becomes 0). A large share of these non-zero values lies below 6.1e-05: "
            "in float16 they lose precision or vanish, which for gradients means no update."
        ),
        fixes=(
            FixTemplate(
                "Scale the loss with GradScaler so that small gradients survive float16",
                'scaler = torch.amp.GradScaler("{device}")\nscaler.scale(loss).backward()',
                when=frozenset({"backward"}),
            ),
            _OP_UPCAST,
            FixTemplate(_BF16.title, _BF16.snippet, _BF16.why, unless=_OP_LEVEL),
            FixTemplate(
                "Keep {module} in float32",
                "from dtype_doctor.numerics import keep_in_fp32\nkeep_in_fp32({model}, {modules})",
                unless=_OP_LEVEL,
            ),
        ),
        severity="warning",
        related=("fp16-headroom",),
    ),
    Family(
        code="grad-scaler-collapse",
        title="GradScaler's scale fell below 1: gradients overflow even unscaled",
        cause=(
            "The scale halves at every step with inf/NaN gradients. Below 1 it shrinks the gradients "
            "instead of protecting them, and steps keep being skipped: the overflow is not caused by "
            "the scaling but by the float16 range of the model itself (common for bf16-pretrained "
            "models run in float16)."
        ),
        fixes=(
            FixTemplate(
                "Train in bfloat16 autocast (no GradScaler needed)",
                'with torch.autocast("{device}", dtype=torch.bfloat16):\n    loss = model(x)\nloss.backward()',
            ),
            FixTemplate(
                "Find the layer that overflows and keep it in float32",
                "dtype-doctor numerics model.py:make_model --input 1x3x64x64 --dtype float16 --train",
            ),
        ),
        related=("grad-scaler-overflow", "fp16-overflow"),
    ),
    Family(
        code="grad-scaler-growth",
        title="GradScaler's scale keeps growing without bound",
        cause=(
            "The scale doubles after every run of steps without inf/NaN gradients. Far above 2**24 it "
            "means the gradients are tiny or zero: the loss may not reach the parameters, or they are "
            "frozen, or the gradients underflow to 0 even after scaling."
        ),
        fixes=(
            FixTemplate(
                "Check that the scaled parameters receive gradients",
                "print([n for n, p in model.named_parameters() if p.requires_grad and p.grad is None])",
            ),
            FixTemplate(
                "Cap the growth (fewer doublings)",
                'scaler = torch.amp.GradScaler("cuda", growth_interval=2000, growth_factor=2.0)',
            ),
        ),
        severity="warning",
        related=("grad-scaler-overflow", "fp16-underflow"),
    ),
)
