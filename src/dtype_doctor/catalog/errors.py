"""Families of mixed-precision runtime errors: texts, causes, fixes. Data only."""

from __future__ import annotations

from .model import Family, FixTemplate, MessagePattern

ERROR_FAMILIES: tuple[Family, ...] = (
    Family(
        code="matmul-dtype-mismatch",
        title="Matrix multiply operands have different dtypes",
        cause="Matrix multiply operands have different dtypes.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="scalar-type-mismatch",
        title="An op expected one scalar type and found another",
        cause="An op expected one scalar type and found another.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="conv-weight-dtype-mismatch",
        title="Convolution input and weight have different dtypes",
        cause="Convolution input and weight have different dtypes.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="conv-bias-dtype-mismatch",
        title="Convolution input and bias have different dtypes",
        cause="Convolution input and bias have different dtypes.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="norm-dtype-mismatch",
        title="Normalisation input and parameters have different dtypes",
        cause="Normalisation input and parameters have different dtypes.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="attention-dtype-mismatch",
        title="Attention query, key, value or mask have different dtypes",
        cause="Attention query, key, value or mask have different dtypes.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="flash-attention-dtype",
        title="Flash/memory-efficient attention needs fp16 or bf16 inputs",
        cause="Flash/memory-efficient attention needs fp16 or bf16 inputs.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="index-put-dtype-mismatch",
        title="Indexed assignment between different dtypes",
        cause="Indexed assignment between different dtypes.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="loss-dtype-mismatch",
        title="Loss inputs or targets have the wrong dtype",
        cause="Loss inputs or targets have the wrong dtype.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="oneflow-infer-dtype",
        title="OneFlow type inference failed: float32 expected, float16 found",
        cause="OneFlow type inference failed: float32 expected, float16 found.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="half-unsupported-kernel",
        title="This kernel has no float16/bfloat16 implementation on this device",
        cause="This kernel has no float16/bfloat16 implementation on this device.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="fp16-gradient-unscale",
        title="GradScaler was given float16 parameters",
        cause="GradScaler was given float16 parameters.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="grad-scaler-overflow",
        title="GradScaler found inf/NaN gradients and skipped steps",
        cause="GradScaler found inf/NaN gradients and skipped steps.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="nonfinite-values",
        title="NaN or inf values appeared",
        cause="NaN or inf values appeared.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="overflow-on-cast",
        title="Value out of range for the target dtype",
        cause="Value out of range for the target dtype.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="bf16-unsupported-hardware",
        title="bfloat16 is not supported (natively) on this hardware",
        cause="bfloat16 is not supported (natively) on this hardware.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="cudnn-half-unsupported",
        title="cuDNN has no kernel for this half-precision configuration",
        cause="cuDNN has no kernel for this half-precision configuration.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="apex-conflict",
        title="NVIDIA apex kernels disagree with the model's dtypes",
        cause="NVIDIA apex kernels disagree with the model's dtypes.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="autocast-half-conflict",
        title="A model already in fp16/bf16 runs under autocast of the other dtype",
        cause="A model already in fp16/bf16 runs under autocast of the other dtype.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="optimizer-state-dtype",
        title="Optimizer state and parameters have different dtypes",
        cause="Optimizer state and parameters have different dtypes.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="mps-dtype-unsupported",
        title="This dtype is not supported on Apple MPS",
        cause="This dtype is not supported on Apple MPS.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="quantized-compute-dtype",
        title="Quantized layer's compute dtype differs from its input",
        cause="Quantized layer's compute dtype differs from its input.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
    Family(
        code="jit-fuser-half",
        title="TorchScript/fuser failed on half precision",
        cause="TorchScript/fuser failed on half precision.",
        fixes=(FixTemplate("Make every operand of {module} the same dtype", "x = x.to({dtype})"),),
    ),
)

__all__ = ["ERROR_FAMILIES", "Family", "FixTemplate", "MessagePattern"]
