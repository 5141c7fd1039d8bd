"""`dtype-doctor check`: every dtype mismatch of a forward, found on the meta device (no GPU, no data)."""

from __future__ import annotations

import argparse

from ..catalog.family_codes import CHECK_INCOMPLETE
from ..cli import EXIT_FINDINGS, EXIT_OK
from ..errors import DoctorError
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
        "Without --input, the usual inputs of transformers/diffusers models are made up in --dtype",
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
    if not positional and not named:
        named = default_inputs(model, dtype)
        if named is None:
            raise DoctorError(f"no --input given and no default inputs known for {type(model).__name__}")
        flags = dict.fromkeys(named, "a default input (no --input given)")
    report = check(
        model,
        *positional,
        dtype=dtype,
        keep_fp32=args.keep_fp32,
        autocast=autocast,
        input_flags=flags,
        **named,
    )
    patched = check_with_patch(report, args) if patch else None
    emit(report, args)
    if patched is not None:
        return patched
    incomplete = CHECK_INCOMPLETE in report.codes()  # not clean: part of forward was not checked
    return EXIT_FINDINGS if report.errors or incomplete else EXIT_OK
