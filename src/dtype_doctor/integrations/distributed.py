"""torch.distributed / torchrun: one report per rank, merged on rank 0 when a process group exists.

    from dtype_doctor.integrations.distributed import distributed_watch
    with distributed_watch(model, path="dtype-doctor.json"):
        model(x)

Every rank writes `dtype-doctor.rank{N}.json`. When a process group is initialised, every rank
(a failing one too) publishes its report in the process group's key-value store, and rank 0 waits
for them at most `gather_timeout` seconds and writes the merged report to `dtype-doctor.json`,
naming the ranks that did not report in time. No collective is used: a rank that failed (or never
got there) cannot make the healthy ranks raise a gloo error or block for the process-group
timeout; `dtype-doctor merge dtype-doctor.rank*.json` can still merge the files later.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..merge import merge_reports
from ..report import Location, Report
from ..sections import DtypeMap
from .parallel_audit import audit_deepspeed_config, audit_fsdp_policy

__all__ = [
    "RankInfo",
    "audit_deepspeed_config",
    "audit_fsdp_policy",
    "distributed_watch",
    "gather_reports",
    "rank_info",
    "rank_report_path",
    "tag_report",
]


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int | None = None


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


def _process_group() -> Any | None:
    """torch.distributed when a process group is initialised, else None (never imports torch itself)."""
    import sys

    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def rank_info() -> RankInfo | None:
    """This process's rank: from the process group when there is one, else torchrun/SLURM/MPI env vars."""
    dist = _process_group()
    if dist is not None:
        return RankInfo(dist.get_rank(), dist.get_world_size(), _env_int("LOCAL_RANK"))
    for rank_var, world_var, local_var in (
        ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ):
        rank, world = _env_int(rank_var), _env_int(world_var)
        if rank is not None and world is not None:
            return RankInfo(rank, world, _env_int(local_var))
    return None


def tag_report(report: Report, info: RankInfo) -> Report:
    """Stamp the rank on the report's meta and on every finding's location."""
    report.meta["rank"] = info.rank
    report.meta["world_size"] = info.world_size
    if info.local_rank is not None:
        report.meta["local_rank"] = info.local_rank
    for f in report.findings:
        if f.location is None:
            f.location = Location()
        if f.location.rank is None:
            f.location.rank = info.rank
    return report


def rank_report_path(path: str | os.PathLike[str], rank: int) -> Path:
    """'out/report.json' → 'out/report.rank1.json'; a '{rank}' in the name is filled in instead."""
    p = Path(path)
    if "{rank}" in p.name:
        return p.with_name(p.name.replace("{rank}", str(rank)))
    if re.search(r"rank\d+", p.name):
        return p
    suffix = p.suffix or ".json"
    return p.with_name(f"{p.stem}.rank{rank}{suffix}")


_GATHERS = itertools.count()  # every rank calls gather_reports in the same order: same keys
_POLL_S = 0.05


def gather_reports(report: Report, timeout: float = 60.0) -> Report | None:
    """Every rank passes its report; rank 0 gets the merged report, the others None at once.

    Through the process group's store, not a collective: rank 0 waits at most `timeout` seconds
    for the others and merges what arrived (`meta["missing_ranks"]` names the rest). Without an
    initialised process group (or with one rank) the report itself is returned.
    """
    dist = _process_group()
    if dist is None or dist.get_world_size() < 2:
        return report
    store = _store(dist)
    if store is None:  # a process group without a store: the collective is all there is
        texts: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(texts, report.to_json(indent=None))
        if dist.get_rank() != 0:
            return None
        return merge_reports([Report.from_json(t) for t in texts], list(range(len(texts))))
    prefix = f"dtype-doctor/gather{next(_GATHERS)}/rank"
    store.set(f"{prefix}{dist.get_rank()}", report.to_json(indent=None))
    if dist.get_rank() != 0:
        return None
    texts_by_rank = _collect(store, prefix, dist.get_world_size(), timeout)
    ranks = sorted(texts_by_rank)
    merged = merge_reports([Report.from_json(texts_by_rank[r]) for r in ranks], ranks)
    missing = [r for r in range(dist.get_world_size()) if r not in texts_by_rank]
    if missing:
        merged.meta["missing_ranks"] = missing
        warnings.warn(
            f"dtype-doctor: no report from rank(s) {missing} within {timeout:g} s; merged the others",
            RuntimeWarning,
            stacklevel=2,
        )
    return merged


def _store(dist: Any) -> Any | None:
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None


def _collect(store: Any, prefix: str, world_size: int, timeout: float) -> dict[int, str]:
    """The reports present in the store by the deadline (each key read once, then deleted)."""
    deadline = time.monotonic() + timeout
    texts: dict[int, str] = {}
    while True:
        for rank in range(world_size):
            key = f"{prefix}{rank}"
            if rank not in texts and store.check([key]):
                texts[rank] = store.get(key).decode("utf-8")
                with contextlib.suppress(Exception):
                    store.delete_key(key)
        if len(texts) == world_size or time.monotonic() >= deadline:
            return texts
        time.sleep(_POLL_S)


@dataclass
class DistributedSession:
    """What `distributed_watch` yields: the watch session, and after the block the merged report."""

    watch: Any
    info: RankInfo | None
    rank_path: Path | None = None
    merged: Report | None = None
    gather_timeout: float = 60.0  # a rank whose block raised waits for no one (0)

    @property
    def report(self) -> Report:
        return self.watch.report


@contextlib.contextmanager
def distributed_watch(
    model: Any = None,
    path: str | os.PathLike[str] | None = "dtype-doctor.json",
    gather: bool = True,
    gather_timeout: float = 60.0,
    **watch_kwargs: Any,
) -> Iterator[DistributedSession]:
    """`watch()` on every rank, with per-rank reports and the rank-0 merge described above.

    A rank whose block raised still publishes its report (with the diagnosis) but waits for no
    one: its user's exception goes on at once.
    """
    from ..watching import watch

    info = rank_info()
    state: DistributedSession | None = None
    failed = True
    try:
        with watch(model=model, **watch_kwargs) as session:
            state = DistributedSession(session, info)
            yield state
        failed = False
    finally:
        # after watch's own exit, so that the diagnosis of a failure is in the report
        if state is not None:
            try:
                state.gather_timeout = 0.0 if failed else gather_timeout
                _finish(state, model, path, gather)
            except Exception as exc:
                # never replace the user's error, never end a healthy rank's run
                warnings.warn(f"dtype-doctor: cannot write the report: {exc}", RuntimeWarning, stacklevel=3)


def _finish(state: DistributedSession, model: Any, path: Any, gather: bool) -> None:
    report = state.report
    if model is not None and report.section(DtypeMap) is None:
        from ..dtype_map import module_dtype_map

        report.sections.append(module_dtype_map(model))
    if state.info is None:  # not a distributed run: one plain report
        state.merged = report
        if path is not None:
            Path(path).write_text(report.to_json() + "\n", encoding="utf-8")
        return
    info = state.info
    tag_report(report, info)
    if path is not None:
        state.rank_path = rank_report_path(path, info.rank)
        state.rank_path.parent.mkdir(parents=True, exist_ok=True)
        state.rank_path.write_text(report.to_json() + "\n", encoding="utf-8")
    if not gather:
        return
    state.merged = gather_reports(report, state.gather_timeout)
    if state.merged is not None and path is not None and info.world_size > 1:
        Path(path).write_text(state.merged.to_json() + "\n", encoding="utf-8")
