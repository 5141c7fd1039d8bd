"""Families produced by `env`: libraries and hardware that change precision behind the user's back."""

from __future__ import annotations

from .model import Family, FixTemplate

ENV_FAMILIES: tuple[Family, ...] = (
    Family(
        code="pypi-apex-clash",
        title="The `apex` installed is the unrelated PyPI package, not NVIDIA apex",
        cause=(
            "`pip install apex` installs a Pyramid web-framework helper that happens to be called "
            "apex; it fails on import ({detail}) and breaks every library that tries `import apex`."
        ),
        severity="error",
        fixes=(
            FixTemplate("Uninstall it", "pip uninstall -y apex", "Nothing in a PyTorch project needs it."),
            FixTemplate(
                "If you need NVIDIA apex, build it from source",
                "git clone https://github.com/NVIDIA/apex && cd apex && "
                'pip install -v --no-build-isolation --config-settings "--build-option=--cpp_ext" '
                '--config-settings "--build-option=--cuda_ext" .',
                "Usually you do not: torch.autocast and torch.amp.GradScaler replace apex.amp.",
            ),
        ),
        related=("apex-conflict",),
    ),
    Family(
        code="apex-no-cuda-ext",
        title="NVIDIA apex is installed without its CUDA extensions",
        cause=(
            "apex was built without --cuda_ext: `fused_layer_norm_cuda` is missing, so any library "
            "that swaps in apex's FusedLayerNorm/FusedRMSNorm fails at the first forward."
        ),
        severity="warning",
        fixes=(
            FixTemplate("Uninstall apex and use PyTorch's own kernels", "pip uninstall -y apex"),
            FixTemplate(
                "Rebuild apex with --cuda_ext", "pip install -v --no-build-isolation ... --cuda_ext ."
            ),
        ),
        related=("apex-conflict",),
    ),
    Family(
        code="oneflow-torch-autocast",
        title="OneFlow/OneDiff is installed next to torch: do not mix the two precision managers",
        cause=(
            "A module compiled by onediff runs on OneFlow; wrapping it in torch.autocast (or "
            "casting with .half() and then autocasting) makes the two precision managers disagree: "
            "`InferDataType Failed. Expected kFloat, but got kFloat16`."
        ),
        severity="warning",
        fixes=(
            FixTemplate(
                "Keep the fp16 model and drop torch.autocast around the compiled module",
                "pipe = pipe.to(torch.float16)\nimage = pipe(prompt).images[0]   # no torch.autocast here",
            ),
            FixTemplate(
                "Use OneFlow's autocast for OneFlow graphs",
                'import oneflow\nwith oneflow.autocast("cuda"):\n    out = compiled(x)',
            ),
        ),
        related=("oneflow-infer-dtype", "autocast-half-conflict"),
    ),
    Family(
        code="accelerate-mixed-precision",
        title="accelerate is configured to add mixed precision to every launch",
        cause=(
            "accelerate's {source} sets mixed_precision={dtype}: `accelerator.prepare(model)` wraps "
            "forward in torch.autocast and converts outputs to fp32. A model you also cast with "
            ".half()/.to(bfloat16) then runs under two precision managers."
        ),
        severity="info",
        fixes=(
            FixTemplate(
                "Choose one precision manager: let accelerate do it, or turn it off",
                "accelerate launch --mixed_precision no train.py   # or: accelerate config",
            ),
        ),
        related=("autocast-half-conflict",),
    ),
    Family(
        code="extension-torch-mismatch",
        title="A compiled extension was built for a different torch",
        cause=(
            "{package} {version} declares {requirement}, but torch {torch} is installed. Its "
            "kernels fail to load (undefined symbols) or the library silently falls back to slower "
            "or different-precision paths."
        ),
        severity="warning",
        fixes=(
            FixTemplate(
                "Install the build that matches this torch",
                "pip install --force-reinstall --no-deps {package}  # the wheel built for torch {torch}",
            ),
            FixTemplate("Or uninstall it if nothing needs it", "pip uninstall -y {package}"),
        ),
    ),
    Family(
        code="flash-attn-unsupported-gpu",
        title="flash-attn 2 needs an Ampere or newer GPU",
        cause=(
            "flash-attn 2 kernels need compute capability 8.0+ and fp16/bf16 inputs; on {gpu} "
            "(sm{capability}) they raise, and libraries that auto-select them fail."
        ),
        severity="warning",
        fixes=(
            FixTemplate(
                "Use PyTorch's scaled_dot_product_attention",
                'model = AutoModel.from_pretrained(..., attn_implementation="sdpa")',
            ),
        ),
        related=("flash-attention-dtype",),
    ),
    Family(
        code="cpu-half-emulated",
        title="This CPU has no native fp16/bf16 arithmetic",
        cause=(
            "The CPU lacks {missing}: fp16/bf16 ops convert to fp32 internally, so low precision "
            "saves memory but is usually slower than fp32 here."
        ),
        severity="info",
        fixes=(
            FixTemplate(
                "Measure before choosing",
                "dtype-doctor compare model.py:build --input 1x3x224x224",
                "On such CPUs fp32 is usually fastest.",
            ),
        ),
    ),
)

__all__ = ["ENV_FAMILIES"]
