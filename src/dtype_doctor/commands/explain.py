"""`dtype-doctor explain`: an error message, traceback or log → what it is and how to fix it."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING, BinaryIO

from ..catalog.family_codes import UNKNOWN
from ..errors import DoctorError
from ..render.fold import fold_prose_line, terminal_width

if TYPE_CHECKING:
    from ..explaining.stream import Source

HELP = "explain an error message, a traceback or a whole training log"
DESCRIPTION = """\
Read PyTorch mixed-precision error text (one line, a traceback, or a log of any size) and name each
error: its family, which operand is which and its dtype, where it was raised, and the fixes that fit
the set-up the text shows (apex, OneFlow, autocast, torchrun ranks...). Never imports torch."""
EPILOG = """examples:
  dtype-doctor explain "mat1 and mat2 must have the same dtype, but got Float and Half"
  dtype-doctor explain --file train.log
  dtype-doctor explain train.log          # TEXT naming an existing file is read as --file
                                          # (a log's name that is no file: exit 2, says so)
  dtype-doctor explain --file rank0.log --file rank1.log --json
  python train.py 2>&1 | dtype-doctor explain -

exit codes: 0 diagnosed, 3 nothing recognised, 2 bad usage or unreadable input"""

MAX_BYTES = 2 * 1024**3  # an endless stream (`yes |`) stops here; memory stays bounded all along
BINARY_PROBE = 64 * 1024  # the first bytes of an input: all NUL (/dev/zero, a disk image) is not a log


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
    parser.add_argument(
        "--no-env",
        action="store_true",
        help="do not read this machine (apex, flash-attn, xformers, OneFlow, the GPU's bf16 support) "
        "to break ties the text leaves open",
    )
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    from ..explaining import explain_sources
    from ..explaining.environment import Environment
    from . import EXIT_NOTHING, EXIT_OK
    from ._output import check_output_paths, emit

    sources: list[tuple[str | None, Source]] = []
    read_as_file = None
    inputs = [p for p in args.file if p != "-"]
    if args.text is not None and args.text != "-" and _names_a_file(args.text):
        read_as_file = args.text  # `explain train.log`: surely the log, not the words "train.log"
        inputs.append(read_as_file)
    elif args.text is not None and _looks_like_a_path(args.text):
        raise DoctorError(_no_such_file(args.text))  # `explain trian.log`: a typo, not error text
    check_output_paths(args, inputs)  # `--json=train.log` would overwrite the log it reads
    with contextlib.ExitStack() as stack:
        if args.text == "-":
            sources.append(("<stdin>", _Reader(sys.stdin.buffer, "standard input")))
        elif read_as_file:
            said = f"dtype-doctor explain: reading the file {args.text} (as --file would)"
            print("\n".join(fold_prose_line(said, terminal_width())), file=sys.stderr)
            sources.append((args.text, _open(args.text, stack)))
        elif args.text is not None:
            # the bytes of the argument: undecodable ones (surrogates in argv) are decoded like a log's
            sources.append((None, os.fsencode(args.text)))
        for path in args.file:
            sources.append(
                ("<stdin>", _Reader(sys.stdin.buffer, "standard input"))
                if path == "-"
                else (path, _open(path, stack))
            )
        if not sources:
            raise DoctorError("give the error TEXT, --file LOG, or '-' to read standard input")
        report = explain_sources(sources, env=None if args.no_env else Environment())
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


# what a log's name ends in; error text is never one such word alone
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".stderr", ".stdout", ".json", ".jsonl", ".trace", ".tb")


def _looks_like_a_path(text: str) -> bool:
    """One word that names a file: a folder in it, or a log's ending (`train.log`, `logs/rank0`)."""
    word = text.strip()
    if not word or any(c.isspace() for c in word) or len(word) > 4096:
        return False
    return "/" in word.strip("/") or word.lower().endswith(LOG_SUFFIXES)


def _no_such_file(path: str) -> str:
    """'trian.log: no such file (did you mean train.log?)': the nearest name in its folder."""
    import difflib

    folder, name = os.path.split(path)
    try:
        names = [n for n in os.listdir(folder or ".") if os.path.isfile(os.path.join(folder or ".", n))]
    except OSError:
        names = []
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    hint = f" (did you mean {os.path.join(folder, close[0])}?)" if close else ""
    return f"{path}: no such file{hint}"


class _Reader:
    """A binary stream read in chunks by explain: refuses a stream of NUL bytes and an endless one."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self.stream = stream
        self.name = name
        self.read_bytes = 0

    def read(self, n: int) -> bytes:
        try:
            data = self.stream.read(n)
        except OSError as exc:
            raise DoctorError(f"cannot read {self.name}: {exc.strerror or exc}") from None
        if (
            self.read_bytes == 0
            and data
            and data[:BINARY_PROBE].count(0) * 10 >= len(data[:BINARY_PROBE]) * 9
        ):
            raise DoctorError(f"{self.name} is binary data (NUL bytes), not a log")
        self.read_bytes += len(data)
        if self.read_bytes > MAX_BYTES:
            raise DoctorError(
                f"{self.name} is larger than {_size(MAX_BYTES)}; pass the part around the error"
            )
        return data


def _size(n: int) -> str:
    return f"{n / 1024**3:g} GiB" if n >= 1024**3 else f"{n:,} bytes"


def _open(path: str, stack: contextlib.ExitStack) -> _Reader:
    if os.path.isdir(path):
        raise DoctorError(f"{path} is a directory, not a log file")
    try:
        fh = stack.enter_context(open(path, "rb"))  # noqa: SIM115
    except FileNotFoundError:
        raise DoctorError(f"{path}: no such file") from None
    except OSError as exc:
        raise DoctorError(f"cannot read {path}: {exc.strerror or exc}") from None
    return _Reader(fh, path)
