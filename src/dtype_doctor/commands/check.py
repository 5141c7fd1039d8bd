"""`dtype-doctor check`: every dtype mismatch of a forward, found on the meta device (no GPU, no data)."""

from __future__ import annotations

import argparse

from ..catalog.family_codes import CHECK_INCOMPLETE
from ..errors import DoctorError
from . import EXIT_FINDINGS, EXIT_OK
from ._output import add_output_options, emit
from ._patch import add_patch_options, check_with_patch, wants_patch
from ._target import add_target_arguments, dtype_option, load_target, refuse_lazy

HELP = "dry-run a model on the meta device and list every dtype mismatch a real run would hit"
DESCRIPTION = (
    "Build the model on the meta device (no memory, no GPU), put it in --dtype, and run forward once under "
    "dtype-doctor's op contracts: every mismatch, with module path, operands, origins and fixes. "
    "Exit 1 when a mismatch (error) is found or the dry run could not finish, 0 when clean."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_arguments(parser)
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="[NAME=]SHAPE[:DTYPE]",
        help="a forward input, e.g. sample=2x4x64x64:float32 (positional without NAME=); repeatable. "
        "Without --input, the usual inputs of transformers/diffusers models are made up in --dtype "
        "(else in the dtype most of the model's parameters hold)",
    )
    add_output_options(parser)
    add_patch_options(parser)


def dtype_options(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """--dtype (a floating dtype) and --autocast (float16 or bfloat16), checked; an empty value is an error."""
    for option, value in (("--dtype", args.dtype), ("--autocast", args.autocast)):
        if value is not None and not value.strip():
            raise DoctorError(f"{option} needs a dtype, got an empty value")
    dtype = dtype_option(args.dtype)
    if dtype is not None and not dtype.startswith(("float", "bfloat")):
        raise DoctorError(f"--dtype must be a floating dtype, got {args.dtype}")
    autocast = dtype_option(args.autocast)
    if autocast is not None and autocast not in ("float16", "bfloat16"):
        raise DoctorError(f"--autocast must be float16 or bfloat16, got {args.autocast}")
    return dtype, autocast


def input_flags(model: object, texts: list[str]) -> dict[str, str]:
    """Input name → the `--input` flag that made it (positional inputs named by forward's signature)."""
    import inspect

    try:
        names = [n for n in inspect.signature(model.forward).parameters if n != "self"]  # type: ignore[attr-defined]
    except (TypeError, ValueError, AttributeError):
        names = []
    out, position = {}, 0
    for text in texts:
        name, eq, _ = text.partition("=")
        if eq and name.isidentifier():
            out[name] = f"--input {text}"
        else:
            out[names[position] if position < len(names) else f"args[{position}]"] = f"--input {text}"
            position += 1
    return out


def run(args: argparse.Namespace) -> int:
    from ..inputs import split_inputs

    dtype, autocast = dtype_options(args)  # cheap checks first: bad input fails before torch is imported
    patch = wants_patch(args)
    positional, named = split_inputs(args.input)
    factory = load_target(args)

    from ..checking.check import build_on_meta, check
    from .defaults import default_inputs

    model = build_on_meta(factory)
    refuse_lazy(model)
    flags = input_flags(model, args.input)
    made_up = not positional and not named
    if made_up:
        named = default_inputs(model, dtype)
        if named is None:
            raise DoctorError(f"no --input given and no default inputs known for {type(model).__name__}")
        flags = dict.fromkeys(named, "a default input (no --input given)")
    from ..checking.fix_replay import made_by

    token = made_by.set(factory)  # the fixes are written in the factory's names
    try:
        report = check(
            model,
            *positional,
            dtype=dtype,
            keep_fp32=args.keep_fp32,
            autocast=autocast,
            input_flags=flags,
            **named,
        )
    finally:
        made_by.reset(token)
    if args.target:  # where SARIF and GitHub point a finding that has no line of the user's
        report.meta.setdefault("target", args.target)
    if made_up:  # the console says what was run, not only the JSON
        shown = ", ".join(f"{k}={v}" for k, v in (report.meta.get("inputs") or {}).items())
        report.meta.setdefault("notes", []).append(f"inputs made up (no --input given): {shown}")
    if dtype is not None and dtype.startswith("float8"):
        _float8_kernels(model, dtype, report)
    patched = check_with_patch(report, args) if patch else None
    emit(report, args)
    if patched is not None:
        return patched
    incomplete = CHECK_INCOMPLETE in report.codes()  # not clean: part of forward was not checked
    return EXIT_FINDINGS if report.errors or incomplete else EXIT_OK


_MATMUL_LAYERS = ("Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "Conv1D", "LazyLinear")


def _float8_kernels(model: object, dtype: str, report: object) -> None:
    """The meta dry run has a float8 kernel for everything; CUDA has no float8 matmul or conv (only
    torch._scaled_mm, with scales): every Linear/Conv put in float8 fails there."""
    from .. import catalog
    from ..report import Location

    layers = [
        (name, type(m).__name__)
        for name, m in getattr(model, "named_modules", lambda: [])()
        if type(m).__name__ in _MATMUL_LAYERS
    ]
    if not layers:
        return
    name, kind = layers[0]
    finding = catalog.finding(
        "half-unsupported-kernel",
        names={"dtype": dtype, "kernel": "addmm"},
        message=f"{len(layers)} matmul/conv layer(s) in {dtype}, first '{name or '<root>'}' ({kind}): CUDA "
        f"has no {dtype} kernel for them (\"addmm_cuda\" not implemented for '{dtype}'); float8 matmuls "
        "go through torch._scaled_mm with scales (torchao's float8 training, transformer-engine)",
        location=Location(module=name or None, module_type=kind),
    )
    finding.count = len(layers)
    report.add(finding)  # type: ignore[attr-defined]
