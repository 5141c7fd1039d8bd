"""Families produced by `compare`: which precision to run in, and why the others fail. Data only."""

from __future__ import annotations

from .model import Family, FixTemplate

COMPARE_FAMILIES: tuple[Family, ...] = (
    Family(
        code="precision-recommendation",
        title="Which precision to run in on this hardware",
        cause=(
            "Measured side by side on this machine: speed, memory and error against the fp32 "
            "reference. The choice is the fastest variant whose error stays within the tolerance."
        ),
        severity="info",
        fixes=(
            FixTemplate(
                "Run the model in {dtype} ({variant})",
                "{snippet}",
                "Measured fastest within the error tolerance on this hardware; re-measure on the target GPU.",
            ),
        ),
    ),
    Family(
        code="precision-variant-failed",
        title="The model does not run in this precision",
        cause=(
            "Running the model in {variant} raised an exception; the fp32 run works, so something in "
            "the model does not follow the precision change (a tensor made in a fixed dtype, a kernel "
            "with no {dtype} implementation, or a second precision manager)."
        ),
        severity="warning",
        fixes=(
            FixTemplate(
                "Locate the failing op and the tensor's origin",
                "dtype-doctor run your_script.py   # or: with dtype_doctor.watch(model): model(x)",
                "watch names the module, the operands and where each got its dtype.",
            ),
            FixTemplate(
                "Use autocast instead of casting the whole model",
                'with torch.autocast("{device}", dtype={dtype}):\n    out = model(x)',
                "autocast picks a dtype per op and keeps the fragile ones in fp32.",
                unless=frozenset({"autocast"}),
            ),
        ),
        related=("matmul-dtype-mismatch", "half-unsupported-kernel", "autocast-half-conflict"),
    ),
    Family(
        code="precision-overflow",
        title="Outputs become inf/NaN in this precision",
        cause=(
            "In {variant} the model produces non-finite values; the first module whose output is "
            "non-finite while its inputs were finite is {module}. fp16 tops out at 65504, so large "
            "activations (attention logits, residual sums, variance in a norm) overflow."
        ),
        severity="warning",
        fixes=(
            FixTemplate(
                "Keep {module} in fp32 and cast at its borders",
                "from dtype_doctor import to_precision\n"
                "model = to_precision(model, {dtype}, keep_fp32=[{module!r}])",
                "Only that module pays the fp32 cost; the '+keep' rows of compare measure it first.",
            ),
            FixTemplate(
                "Use bfloat16 (same range as fp32) where the hardware supports it",
                "model = model.to(torch.bfloat16)",
                "bf16 has 8 exponent bits: it does not overflow where fp32 does not.",
                when=frozenset({"cast-float16"}),
            ),
            FixTemplate(
                "Autocast to bfloat16 (same range as fp32) where the hardware supports it",
                'with torch.autocast("{device}", dtype=torch.bfloat16):\n    out = model(x)',
                "bf16 has 8 exponent bits: it does not overflow where fp32 does not.",
                when=frozenset({"autocast-float16"}),
            ),
            FixTemplate(
                "Use autocast, which runs reductions and norms in fp32",
                'with torch.autocast("{device}", dtype={dtype}):\n    out = model(x)',
                unless=frozenset({"autocast"}),
            ),
        ),
        related=("nonfinite-values",),
    ),
    Family(
        code="precision-error-high",
        title="Output error against fp32 is above the tolerance",
        cause=(
            "In {variant} the output differs from the fp32 reference by more than the tolerance; "
            "the modules that add the most error are listed (measured one module at a time on the "
            "same fp32 inputs)."
        ),
        severity="warning",
        fixes=(
            FixTemplate(
                "Keep the most sensitive modules in fp32",
                "from dtype_doctor import to_precision\nmodel = to_precision(model, {dtype}, keep_fp32={keep!r})",
                "The '+keep' rows of the comparison show how much of the error this buys back.",
            ),
            FixTemplate(
                "Use autocast rather than a full cast", 'with torch.autocast("{device}", dtype={dtype}):'
            ),
        ),
    ),
    Family(
        code="precision-fragile-layers",
        title="Modules whose low-precision output drifts most from fp32",
        cause=(
            "Each module was run in {variant} on the fp32 reference input (cast), and its output "
            "compared with the fp32 module's output, so errors do not accumulate from earlier layers."
        ),
        severity="info",
        fixes=(
            FixTemplate(
                "Keep these modules in fp32",
                "from dtype_doctor import to_precision\nmodel = to_precision(model, {dtype}, keep_fp32={keep!r})",
                "The '+keep' rows of the comparison show what this buys back and what it costs.",
            ),
        ),
    ),
)

__all__ = ["COMPARE_FAMILIES"]
