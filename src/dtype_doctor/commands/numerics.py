"""`dtype-doctor numerics`: run a model under the numerics monitor and report its ranges."""

from __future__ import annotations

import argparse

HELP = "find the first module that overflows, underflows or makes NaN (forward and backward)"
DESCRIPTION = (
    "Build a model from PATH_OR_MODULE:FACTORY, run it on random inputs under the numerics "
    "monitor and report: the first producer of inf/NaN (module, op, step, input ranges), values "
    "close to float16's limits, and what to keep in float32 or run in bfloat16. Cost: every "
    "monitored step reads each module output once (one fused min/max per tensor, read back once "
    "per step); the costlier checks are sampled: underflow and zero counts on the first monitored "
    "step and one in 100 after it, the float32 re-run of every call (finite but wrong) on the "
    "first low-precision step only, the float32 re-run of a producer and the op-level scan only "
    "after a finding."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ._output import add_output_options

    parser.add_argument("target", metavar="PATH_OR_MODULE:FACTORY", help="e.g. model.py:make_model")
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="[NAME=]SHAPE[:DTYPE]",
        help="a model input, e.g. 1x3x64x64 or input_ids=1x16:int64 (repeatable); floating inputs "
        "without a DTYPE follow --dtype",
    )
    parser.add_argument("--dtype", help="cast the model (and inputs without a dtype) to this, e.g. float16")
    parser.add_argument(
        "--steps", type=int, default=2, help="forward (and backward) steps to run (default 2)"
    )
    parser.add_argument("--every", type=int, default=1, help="monitor every N-th step (default 1)")
    parser.add_argument("--train", action="store_true", help="also run backward on the mean of the outputs")
    parser.add_argument(
        "--find-fp32",
        action="store_true",
        help="search the smallest set of modules to keep in float32 for a finite forward, and verify it",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed for the inputs (default 0)")
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    from ..dtypes import parse_dtype
    from ..errors import DoctorError
    from ..inputs import split_inputs
    from ..loading import call_factory, load_object
    from ..report import Report, Severity
    from . import EXIT_FINDINGS, EXIT_OK
    from ._output import emit

    if args.steps < 1 or args.every < 1:
        raise DoctorError("--steps and --every must be at least 1")
    if args.dtype is not None and not args.dtype.strip():
        raise DoctorError("--dtype needs a dtype, got an empty value")
    dtype_name = parse_dtype(args.dtype) if args.dtype else None
    if dtype_name is not None and not dtype_name.startswith(("float", "bfloat")):
        raise DoctorError(f"--dtype must be a floating dtype, got {args.dtype}")
    specs, kw_specs = split_inputs(args.input)  # bad input fails before torch and the model load

    import torch

    from ..numerics.api import run_numerics

    dtype = getattr(torch, dtype_name) if dtype_name else None
    model = call_factory(load_object(args.target))
    if not isinstance(model, torch.nn.Module):
        raise DoctorError(f"{args.target} did not give a torch.nn.Module (got {type(model).__name__})")
    # a floating input follows --dtype unless its spec named a dtype itself
    pinned = [":" in text.rpartition("=")[2] for text in args.input]
    pinned_args = [p for text, p in zip(args.input, pinned, strict=True) if "=" not in text]
    pinned_kw = {text.partition("=")[0]: p for text, p in zip(args.input, pinned, strict=True) if "=" in text}
    torch.manual_seed(args.seed)

    def make(spec, is_pinned):
        tensor = spec.make()
        if dtype is not None and tensor.is_floating_point() and not is_pinned:
            tensor = tensor.to(dtype)
        return tensor

    inputs = [make(s, p) for s, p in zip(specs, pinned_args, strict=True)]
    kw_inputs = {k: make(s, pinned_kw[k]) for k, s in kw_specs.items()}
    report = Report(tool="numerics", meta={"target": args.target, "dtype": args.dtype, "steps": args.steps})
    run_numerics(
        model,
        inputs,
        kw_inputs,
        dtype=dtype,
        steps=args.steps,
        every=args.every,
        train=args.train,
        find_fp32=args.find_fp32,
        report=report,
    )
    emit(report, args)
    serious = any(f.severity in (Severity.ERROR, Severity.WARNING) for f in report.findings)
    return EXIT_FINDINGS if serious else EXIT_OK
