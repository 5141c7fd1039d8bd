"""`dtype-doctor audit`: the dtype map of a model or pipeline and what in it will fail."""

from __future__ import annotations

import argparse

from ..errors import DoctorError
from . import EXIT_FINDINGS, EXIT_OK
from ._output import add_output_options, emit
from ._target import add_target_arguments, load_target, refuse_lazy

HELP = "dtype map of a model/pipeline: mixed weight/bias, fp32 islands, pipeline components, scaler set-ups"
DESCRIPTION = (
    "Look at a model, a diffusers pipeline or a (model, optimizer, GradScaler) set-up returned by a factory, "
    "without running it: the folded dtype map, modules whose weight and bias disagree, fp32 islands and "
    "whether they are deliberate, pipeline components in different dtypes, GradScaler/optimizer set-ups "
    "that will fail, and a low-precision model under autocast. Exit 1 when an error is found."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_arguments(parser)
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    from .check import dtype_options

    dtype, autocast = dtype_options(args)
    target = load_target(args)

    from torch import nn

    from ..checking.audit import audit, collect
    from ..checking.check import build, check_keep_fp32
    from ..repair.fix import convert

    obj = build(target)  # a model, a pipeline or a (model, optimizer, scaler) set-up
    found = collect(obj)
    for model in found.models.values():
        refuse_lazy(model)
    if not found.models and not found.optimizers:
        name = args.target or args.hf_config
        raise DoctorError(f"{name} gave a {type(obj).__name__}, not a model, pipeline or optimizer")
    if args.keep_fp32 and isinstance(obj, nn.Module):
        check_keep_fp32(obj, args.keep_fp32)
    if dtype is not None and isinstance(obj, nn.Module):
        convert(obj, dtype, args.keep_fp32, loading=True)
    report = audit(obj, autocast=autocast)
    if args.target:  # where SARIF and GitHub point a finding that has no line of the user's
        report.meta.setdefault("target", args.target)
    emit(report, args)
    return EXIT_FINDINGS if report.errors else EXIT_OK
