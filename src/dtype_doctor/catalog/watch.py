"""Families only `watch` can see: silent promotions and the tool's own troubles. Data only."""

from __future__ import annotations

from .model import Family, FixTemplate

WATCH_FAMILIES: tuple[Family, ...] = (
    Family(
        code="silent-promotion",
        title="A float16/bfloat16 tensor met a wider float and was silently promoted",
        cause=(
            "{op} received tensors of different floating dtypes ({dtype} and {other_dtype}); PyTorch "
            "promotes the result to the wider one without a word, so a float32 tensor leaks into the "
            "low-precision path and a later layer fails or runs in the wrong precision."
        ),
        severity="warning",
        fixes=(
            FixTemplate(
                "Create {input} in the model's dtype {at}",
                "{tensor} = {made_op}(..., dtype={dtype})  # the same call, with dtype= (or .to({dtype}))",
                "Every tensor created without dtype= is float32 (torch.get_default_dtype()).",
                when=frozenset({"odd-op"}),
            ),
            FixTemplate(
                "Cast {input} to {dtype} before {op} {at}",
                "{tensor} = {tensor}.to({dtype})",
                "Casting where the two paths meet keeps one dtype policy for the whole model.",
            ),
            FixTemplate(
                "If the wide result is wanted, make it explicit",
                "# upcast every operand with .float() before {op}: a deliberate, explicit float32",
                "An explicit upcast documents intent and is not reported.",
            ),
        ),
        related=("matmul-dtype-mismatch", "conv-bias-dtype-mismatch"),
    ),
    Family(
        code="compiled-region-unwatched",
        title="torch.compile regions ran unwatched",
        cause=(
            "While torch.compile traces, dtype-doctor steps aside so that the compiled program is "
            "exactly yours; ops inside the {graphs} graph(s) compiled while watching were checked "
            "only where they run through Python (eager/aot_eager backends), not in inductor kernels."
        ),
        severity="info",
        fixes=(
            FixTemplate(
                "Watch the model uncompiled to check every op",
                "with dtype_doctor.watch(model=model):\n    model(x)   # the module, not torch.compile(model)",
                "Dtype mismatches do not depend on compilation: the eager run finds the same ones.",
            ),
        ),
    ),
    Family(
        code="child-process-unwatched",
        title="Forked child processes (DataLoader workers, os.fork) ran unwatched",
        cause=(
            "{forks} process(es) forked while watching (DataLoader workers with num_workers > 0, "
            "os.fork, multiprocessing's fork start method); what they ran is not in this report, so a "
            "silent promotion in a dataset's __getitem__ or a collate_fn was not seen."
        ),
        severity="info",
        fixes=(
            FixTemplate(
                "Run the data pipeline in the watched process while diagnosing",
                "loader = DataLoader(dataset, batch_size=..., num_workers=0)",
                "With num_workers=0 every op of the dataset and collate_fn runs under watch.",
            ),
        ),
    ),
    Family(
        code="tool-internal-error",
        title="dtype-doctor hit an internal error and skipped part of its analysis",
        cause=(
            "The watcher caught an exception in its own code; your program ran unchanged, but some "
            "operations may not have been checked."
        ),
        severity="info",
        fixes=(
            FixTemplate(
                "Report it with the evidence below",
                "DTYPE_DOCTOR_DEBUG=1 dtype-doctor run script.py",
                "The evidence names the internal exception.",
            ),
        ),
    ),
)
