"""Families found by looking at a model without running it (audit) and by the fix/guard hooks. Data only."""

from __future__ import annotations

from .model import Family, FixTemplate

AUDIT_FAMILIES: tuple[Family, ...] = (
    Family(
        code="dtype-map",
        title="Parameter and buffer dtypes per module",
        cause="The dtypes the model holds, folded: repeated blocks with the same dtypes are shown once.",
        severity="info",
    ),
    Family(
        code="weight-bias-dtype-mismatch",
        title="A module's parameters have different dtypes",
        cause=(
            "{module} holds {dtype} and {other_dtype} parameters (typically the weight in one dtype and the "
            "bias in another), so every forward through it fails whatever the input dtype: a half-done "
            "conversion (a loader or a multi-GPU launcher that cast the weights but not the biases)."
        ),
        fixes=(
            FixTemplate(
                "Convert the whole model once, to one dtype",
                "model = model.to({dtype})",
                "one policy for every parameter: weights and biases cannot disagree afterwards",
            ),
            FixTemplate(
                "Or let dtype-doctor apply one policy, keeping fragile layers in fp32 on purpose",
                'model = dtype_doctor.fix(model, {dtype}, keep_fp32=("norm",))',
                "casts at the borders of the fp32 islands keep the model running",
            ),
            FixTemplate(
                "Run in the precision the launcher expects (e.g. pass --fp16 / --bf16 consistently)",
                why="CogVLM: the run flags and the model config disagreed",
            ),
        ),
        related=("conv-bias-dtype-mismatch", "matmul-dtype-mismatch", "norm-dtype-mismatch"),
    ),
    Family(
        code="fp32-island",
        title="fp32 parameters inside a low-precision model",
        cause=(
            "{module} stays in {other_dtype} while the model runs in {dtype}. Deliberate for norms and "
            "`_keep_in_fp32_modules`, where the model casts at the border; accidental otherwise, and then the "
            "first op at its border fails or silently promotes the rest of the model to fp32."
        ),
        severity="warning",
        fixes=(
            FixTemplate(
                "Convert it with the rest of the model",
                "{module_ref}.to({dtype})",
                "when nothing requires fp32 there",
                unless=frozenset({"deliberate"}),
            ),
            FixTemplate(
                "Keep it in fp32 on purpose, with casts at its borders",
                'model = dtype_doctor.fix(model, {dtype}, keep_fp32=("{keep}",))',
            ),
        ),
        related=("norm-dtype-mismatch", "matmul-dtype-mismatch"),
    ),
    Family(
        code="pipeline-component-dtype-mismatch",
        title="Components of a pipeline hold different dtypes",
        cause=(
            "{module} is in {other_dtype} while the pipeline's denoiser runs in {dtype}: the tensors it hands "
            "on (prompt embeddings, latents) arrive in the wrong dtype, and the first matmul or conv of the "
            "next component fails (the FLUX/SD3 reports: an fp32 text encoder feeding an fp16 transformer)."
        ),
        severity="warning",
        fixes=(
            FixTemplate("Move the whole pipeline to one dtype", "pipe = pipe.to({dtype})"),
            FixTemplate(
                "Or convert the odd component", "pipe.{module}.to({dtype})", unless=frozenset({"vae"})
            ),
            FixTemplate(
                "A VAE kept in fp32 on purpose (force_upcast) needs its latents cast at the border",
                "image = pipe.vae.decode(latents.to(pipe.vae.dtype)).sample",
                when=frozenset({"vae"}),
            ),
        ),
        related=("matmul-dtype-mismatch", "conv-bias-dtype-mismatch"),
    ),
    Family(
        # the same set-up with the other half dtype is autocast-half-conflict (catalog/errors.py), an error
        code="low-precision-under-autocast",
        title="A model already in fp16/bf16 is set to run under autocast of its own dtype",
        cause=(
            "The parameters are already {dtype} and autocast is set to {other_dtype} too: two precision "
            "managers for one model. Nothing fails, but autocast only adds casts (fp32 ops cast up and back)."
        ),
        severity="warning",
        fixes=(
            FixTemplate(
                "Drop the autocast and keep the converted model",
                "with torch.no_grad():\n    out = model(x.to({dtype}))",
                "one precision manager: the model's own dtype",
            ),
            FixTemplate(
                "Or keep the model in fp32 and let autocast choose per op",
                "model = model.float()\nwith torch.autocast('{device}', dtype={other_dtype}):\n    out = model(x)",
            ),
        ),
        related=("autocast-half-conflict", "oneflow-infer-dtype"),
    ),
)

FIX_FAMILIES: tuple[Family, ...] = (
    Family(
        code="check-incomplete",
        title="The meta dry run stopped before the end of forward",
        cause=(
            "An op could not run on the meta device (it reads tensor values: .item(), data-dependent "
            "shapes, a copy to CPU) or failed for a reason that is not a dtype. The findings before it stand; "
            "what comes after it was not checked."
        ),
        severity="warning",
        fixes=(
            FixTemplate(
                "Check that part with a small real run under watch instead",
                "with dtype_doctor.watch(model, mode='fix') as s:\n    model(*small_inputs)",
            ),
        ),
    ),
    Family(
        code="module-input-cast",
        title="dtype-doctor cast a module input to the module's parameter dtype",
        cause=(
            "{input} reached {module} as {other_dtype} while its parameters are {dtype}; the guard cast it so "
            "that the op runs. Make the producer emit {dtype} to drop the cast."
        ),
        severity="info",
        fixes=(
            FixTemplate(
                "Create or cast the tensor in the model's dtype where it is made",
                "{input} = {input}.to({dtype})",
            ),
        ),
    ),
)

__all__ = ["AUDIT_FAMILIES", "FIX_FAMILIES"]
