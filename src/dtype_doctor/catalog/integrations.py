"""Families found by the integrations: multi-process runs, FSDP and DeepSpeed precision set-ups. Data only."""

from __future__ import annotations

from .model import Family, FixTemplate

INTEGRATION_FAMILIES: tuple[Family, ...] = (
    Family(
        code="rank-divergence",
        title="One rank differs from the others",
        cause=(
            "The processes of one distributed run should see the same dtypes. Rank(s) {ranks} "
            "found something the others did not (or the reverse): usually an input prepared "
            "differently on that rank, a rank-dependent code path, or a different device/GPU "
            "type that changes what autocast or the kernels do."
        ),
        fixes=(
            FixTemplate(
                "Prepare inputs the same way on every rank: cast with the model's dtype",
                "p = next(model.parameters())\nx = x.to(device=p.device, dtype=p.dtype)",
                "A rank-dependent branch (rank == 0 logging, a per-rank dataset shard with a "
                "different collate) is the usual source.",
            ),
            FixTemplate(
                "Run the whole model in one precision on every rank (e.g. --fp16 for CogVLM)",
                "model = model.to({dtype})",
                "Mixed-precision flags read per process (env, config) can differ between ranks.",
            ),
            FixTemplate(
                "Check dtypes where the rank's data enters the model, on every rank",
                "assert x.dtype == next(model.parameters()).dtype, (dist.get_rank(), x.dtype)",
                "The first rank to fail the assert names the branch that differs.",
            ),
        ),
        severity="error",
        related=("scalar-type-mismatch", "conv-bias-dtype-mismatch"),
    ),
    Family(
        code="fsdp-policy-mismatch",
        title="FSDP MixedPrecision policy disagrees with the model's dtypes",
        cause=(
            "FSDP keeps the original parameters as the master copy and casts them to "
            "param_dtype for compute. {detail}"
        ),
        fixes=(
            FixTemplate(
                "Keep the model in float32 and let FSDP cast: load without .half()/torch_dtype",
                "model = Model.from_pretrained(name, torch_dtype=torch.float32)\n"
                "mp = MixedPrecision(param_dtype={dtype}, reduce_dtype=torch.float32, buffer_dtype={dtype})\n"
                "model = FSDP(model, mixed_precision=mp)",
                "FSDP's mixed precision needs full-precision master weights; a model already "
                "in low precision has none, and the optimizer steps in low precision.",
            ),
            FixTemplate(
                "Give every parameter inside one FSDP unit the same dtype before wrapping",
                "model = model.to(torch.float32)",
                "FSDP flattens the parameters of a unit into one tensor; it refuses mixed dtypes.",
            ),
            FixTemplate(
                "Reduce gradients in float32 (reduce_dtype=torch.float32)",
                "MixedPrecision(param_dtype={dtype}, reduce_dtype=torch.float32)",
                "A float16 all-reduce of summed gradients overflows where float32 does not.",
            ),
        ),
        severity="warning",
        related=("fp16-gradient-unscale",),
    ),
    Family(
        code="deepspeed-config-conflict",
        title="DeepSpeed precision settings contradict each other or the model",
        cause="{detail}",
        fixes=(
            FixTemplate(
                "Enable exactly one of fp16 / bf16 in the DeepSpeed config",
                '"bf16": {{"enabled": true}},\n"fp16": {{"enabled": false}}',
                "DeepSpeed refuses both; and amp cannot be combined with either.",
            ),
            FixTemplate(
                "Cast inputs with the engine's dtype, after deepspeed.initialize",
                "engine, *_ = deepspeed.initialize(model=model, config=cfg)\n"
                "x = x.to(engine.device, dtype=next(engine.module.parameters()).dtype)",
                "DeepSpeed casts the module to the config's dtype; a dtype read from the model "
                "before initialize is stale.",
            ),
            FixTemplate(
                "Load the model in float32 and let the config choose the precision",
                "model = Model.from_pretrained(name, torch_dtype=torch.float32)",
            ),
        ),
        severity="warning",
        related=("autocast-half-conflict",),
    ),
)
