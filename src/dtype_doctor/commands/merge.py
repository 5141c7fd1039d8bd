"""dtype-doctor merge: fold per-rank JSON reports into one and name the rank that differs."""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
from pathlib import Path

from ..errors import DoctorError
from . import EXIT_FINDINGS, EXIT_OK
from ._output import add_output_options, check_output_paths, emit

HELP = "merge per-rank reports (report.rank*.json) of a distributed run into one"
DESCRIPTION = (
    "Fold the JSON reports that each rank of a torchrun/distributed run wrote into one report. "
    "Findings seen on several ranks are folded (their ranks listed); a finding or a module dtype "
    "that not every rank shares becomes a rank-divergence finding, shown first."
)

_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT", help="per-rank JSON reports (globs allowed)")
    add_output_options(parser)


def _expand(patterns: list[str]) -> list[Path]:
    paths: list[Path] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            found = sorted(glob.glob(pattern))
            if not found:
                raise DoctorError(f"no file matches {pattern}")
            paths.extend(Path(p) for p in found)
        else:
            paths.append(Path(pattern))
    return _once_each(paths)


def _once_each(paths: list[Path]) -> list[Path]:
    """One path per file: `good.json ./good.json` (or a symlink to it) is one rank, not two."""
    seen: dict[str, Path] = {}
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            print(f"dtype-doctor merge: {path} is {seen[real]} again: read once", file=sys.stderr)
            continue
        seen[real] = path
    return list(seen.values())


def load_rank_report(path: Path, index: int):
    """(rank, Report) from one file; the rank comes from the report, else the file name, else `index`."""
    from ..processors import report_rank
    from ..report import Report

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DoctorError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise DoctorError(f"{path} is not a dtype-doctor JSON report (not UTF-8 text)") from None
    try:
        report = Report.from_json(text)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise DoctorError(f"{path} is not a dtype-doctor JSON report: {exc}") from None
    match = _RANK_IN_NAME.search(path.name)
    return report_rank(report, int(match.group(1)) if match else index), report


def run(args: argparse.Namespace) -> int:
    from ..processors import merge_ranks

    paths = _expand(args.reports)
    check_output_paths(args, [str(p) for p in paths])  # never write over an input
    loaded = [load_rank_report(p, i) for i, p in enumerate(paths)]
    ranks = [r for r, _ in loaded]
    if len(set(ranks)) != len(ranks):
        raise DoctorError(f"two reports claim the same rank (ranks {ranks}); pass one report per rank")
    merged = merge_ranks([rep for _, rep in loaded], ranks)
    merged.meta["merged_from"] = [str(p) for p in paths]
    emit(merged, args)  # `-o merged.json` is `--output json=merged.json`
    return EXIT_FINDINGS if merged.findings else EXIT_OK
