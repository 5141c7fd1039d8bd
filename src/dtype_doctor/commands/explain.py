"""`dtype-doctor explain`: an error message, traceback or log → what it is and how to fix it."""

from __future__ import annotations

import argparse
import os
import sys

from ..catalog.family_codes import UNKNOWN
from ..errors import DoctorError

HELP = "explain an error message, a traceback or a whole training log"
DESCRIPTION = """\
Read PyTorch mixed-precision error text (one line, a traceback, or a log of any size) and name each
error: its family, which operand is which and its dtype, where it was raised, and the fixes that fit
the set-up the text shows (apex, OneFlow, autocast, torchrun ranks...). Never imports torch."""
EPILOG = """examples:
  dtype-doctor explain "mat1 and mat2 must have the same dtype, but got Float and Half"
  dtype-doctor explain --file train.log
  dtype-doctor explain train.log          # TEXT naming an existing file is read as --file
  dtype-doctor explain --file rank0.log --file rank1.log --json
  python train.py 2>&1 | dtype-doctor explain -

exit codes: 0 diagnosed, 3 nothing recognised, 2 bad usage or unreadable input"""

MAX_BYTES = 2 * 1024**3  # refuse inputs above 2 GiB rather than exhaust memory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ._output import add_output_options

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("text", nargs="?", metavar="TEXT", help="the error text; '-' reads standard input")
    parser.add_argument(
        "-f",
        "--file",
        action="append",
        default=[],
        metavar="LOG",
        help="read a log or traceback file (repeat for several files; '-' is standard input)",
    )
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    from ..explaining import explain_sources
    from . import EXIT_NOTHING, EXIT_OK
    from ._output import emit

    sources: list[tuple[str | None, str | bytes]] = []
    read_as_file = None
    if args.text == "-":
        sources.append(("<stdin>", _read_stdin()))
    elif args.text is not None and _names_a_file(args.text):
        read_as_file = args.text  # `explain train.log`: surely the log, not the words "train.log"
        print(f"dtype-doctor explain: reading the file {args.text} (as --file would)", file=sys.stderr)
        sources.append((args.text, _read_file(args.text)))
    elif args.text is not None:
        # the bytes of the argument: undecodable ones (surrogates in argv) are decoded like a log's
        sources.append((None, os.fsencode(args.text)))
    for path in args.file:
        sources.append(("<stdin>", _read_stdin()) if path == "-" else (path, _read_file(path)))
    if not sources:
        raise DoctorError("give the error TEXT, --file LOG, or '-' to read standard input")
    report = explain_sources(sources)
    if read_as_file:
        report.meta["text_read_as_file"] = read_as_file
    emit(report, args)
    return EXIT_NOTHING if report.codes() == [UNKNOWN] else EXIT_OK


def _names_a_file(text: str) -> bool:
    """TEXT that is one line naming an existing file (an error message never does)."""
    if "\n" in text or len(text) > 4096 or not text.strip():
        return False
    try:
        return os.path.isfile(text)
    except (OSError, ValueError):
        return False


def _read_stdin() -> bytes:
    data = sys.stdin.buffer.read(MAX_BYTES + 1)  # capped like files: never read all of a huge stream
    if len(data) > MAX_BYTES:
        raise DoctorError(f"standard input is larger than {_size(MAX_BYTES)}; pass the part around the error")
    return data


def _size(n: int) -> str:
    return f"{n / 1024**3:g} GiB" if n >= 1024**3 else f"{n:,} bytes"


def _read_file(path: str) -> bytes:
    if os.path.isdir(path):
        raise DoctorError(f"{path} is a directory, not a log file")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise DoctorError(f"{path}: no such file") from None
    except OSError as exc:
        raise DoctorError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise DoctorError(f"{path} is larger than {_size(MAX_BYTES)}; pass the part around the error")
    return data
