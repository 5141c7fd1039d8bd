"""`dtype-doctor compare`: which precision to run in, on this hardware, with evidence."""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from typing import Any

from . import EXIT_FINDINGS, EXIT_OK
from ._output import add_output_options, emit, plot_path, stdout_taken

HELP = "run a model in fp32/fp16/bf16/autocast side by side: speed, memory, error, per-layer error"
DESCRIPTION = (
    "Build the model from FACTORY once per precision, run it on the given inputs and compare each "
    "precision with fp32: does it run (and why not), median latency with its spread, throughput, "
    "peak memory, output (and, with --train, gradient) error; which modules drift most in low "
    "precision and what keeping them in fp32 buys back; and a recommendation with its reasons."
)
EPILOG = """examples:
  dtype-doctor compare model.py:build --input 8x3x64x64
  dtype-doctor compare my_pkg.models:tiny_unet --input sample=1x4x32x32 --input timestep=1:int64 \\
      --input encoder_hidden_states=1x77x32 --precisions fp32,fp16,autocast-bf16 --plot cmp.png
  dtype-doctor compare model.py:build --input 4x128:int64 --train --keep-fp32 'ln_f' --json out.json

exit codes: 0 every precision runs, 1 some precision fails/overflows/drifts, 2 bad usage or input
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # keep the examples' layout
    parser.description = textwrap.fill(DESCRIPTION, 88)
    parser.add_argument(
        "target", metavar="PATH_OR_MODULE:FACTORY", help="a callable returning a fresh fp32 nn.Module"
    )
    parser.add_argument(
        "--input",
        "-i",
        action="append",
        default=[],
        metavar="[NAME=]SHAPE[:DTYPE]",
        help="a random model input, e.g. 2x4x64x64, ids=1x32:int64 (repeat for several; named → keyword)",
    )
    parser.add_argument(
        "--precisions",
        "-p",
        default="fp32,fp16,bf16,autocast-fp16,autocast-bf16",
        help="comma-separated precisions (default: %(default)s)",
    )
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument(
        "--keep-fp32",
        action="append",
        metavar="MODULE",
        help="also measure each low precision with this module (path, glob or class name) kept in fp32",
    )
    keep.add_argument("--no-keep", action="store_true", help="skip the keep-in-fp32 rows")
    parser.add_argument(
        "--top-k", type=int, default=3, help="modules kept in fp32 in the automatic rows (default 3)"
    )
    parser.add_argument(
        "--train", action="store_true", help="also time and compare a backward pass (gradients)"
    )
    parser.add_argument("--device", help="cpu, cuda, cuda:1... (default: cuda when available)")
    parser.add_argument("--repeats", "-n", type=int, default=10, help="timed runs per precision (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=2e-2,
        help="largest relative L2 output error a recommendation accepts (default 0.02)",
    )
    parser.add_argument("--no-attribution", action="store_true", help="skip the per-module error")
    parser.add_argument("--seed", type=_seed, default=0, help="seed for the random inputs and the factory")
    parser.add_argument(
        "--plot",
        metavar="PNG",
        help="also write a plot of the comparison (needs matplotlib; --output png=PNG)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_output_options(parser)


def _log_progress(args: argparse.Namespace) -> Any:
    """Progress lines for a stderr that is no terminal (a CI log), throttled; the bar on a terminal."""
    if args.no_progress or args.quiet or sys.stderr.isatty():
        return None
    from ..comparing.progress import line_progress

    return line_progress(sys.stderr)


def run(args: argparse.Namespace) -> int:
    from ..errors import DoctorError
    from ..inputs import split_inputs
    from ..loading import load_object

    if not args.input:
        raise DoctorError("give the model's inputs with --input SHAPE[:DTYPE] (e.g. --input 1x3x224x224)")
    if not (args.tolerance > 0 and math.isfinite(args.tolerance)):
        raise DoctorError(f"--tolerance must be a positive number, got {args.tolerance}")
    if args.top_k < 0:
        raise DoctorError(f"--top-k must be 0 or more, got {args.top_k}")
    if args.device == "meta":
        raise DoctorError("compare measures real runs: --device meta has no data (use `dtype-doctor check`)")
    positional, named = split_inputs(args.input)
    factory = load_object(args.target)
    if not callable(factory):
        raise DoctorError(f"{args.target!r} is not callable")
    precisions = [p for p in args.precisions.split(",") if p.strip()]
    if not precisions:
        raise DoctorError("--precisions is empty")

    from ..comparing import compare

    report = compare(
        factory,
        (positional, named),
        precisions=precisions,
        keep_fp32=None if args.no_keep else (args.keep_fp32 or "auto"),
        train_step=args.train,
        device=args.device,
        warmup=args.warmup,
        repeats=args.repeats,
        top_k=args.top_k,
        tolerance=args.tolerance,
        attribution=not args.no_attribution,
        seed=args.seed,
        progress=not args.no_progress and sys.stderr.isatty(),
        on_progress=_log_progress(args),
    )
    console = None
    if not stdout_taken(args):
        from ..render.console import make_console

        console = make_console(color=not args.no_color)
        if not console.is_terminal and not os.environ.get("COLUMNS"):
            console.width = max(console.width, 120)  # logs and files: no need to squeeze the table
    emit(report, args, console=console)
    if args.plot and console is not None and not args.quiet:
        print(f"plot written to {plot_path(args)}", file=sys.stderr)
    problems = [f for f in report.findings if f.severity.value != "info"]
    return EXIT_FINDINGS if problems else EXIT_OK


def _seed(text: str) -> int:
    """An integer torch.manual_seed accepts: 0 to 2**64 - 1 (argparse turns the error into one line)."""
    value = int(text)
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"must be between 0 and 2**64 - 1, got {text}")
    return value
