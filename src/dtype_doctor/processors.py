"""Processors: pure `Report -> Report` functions between the producers and the renderers.

Each returns a new Report and leaves its input as it was. Findings are identified by the one
`Finding.key()`: identical findings fold in `Report.add` (live, and in every report built here:
merging ranks folds through it); `fold_repeated_blocks` folds repeated blocks by the same key
with the module path generalised; `causes.group_by_cause` sets each finding's root cause.
No torch import: `dtype-doctor merge` reads JSON files; the live gather in
integrations/distributed.py calls `merge_reports` on the reports it collected.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Sequence

from . import catalog, remedies
from .catalog.family_codes import RANK_DIVERGENCE
from .causes import group_by_cause
from .dtype_map import report_map
from .report import Evidence, Finding, Location, Report
from .sections import LEGACY_META_KEYS, DtypeMap, ModuleDtypes, sections_from_meta
from .verifying.contract import untried_reason, unverified_label

_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.|$)")


def _with_findings(report: Report, findings: list[Finding]) -> Report:
    out = copy.copy(report)
    out.meta = dict(report.meta)
    out.sections = list(report.sections)
    out.findings = []
    out.extend(findings)
    return out


def lift_meta_sections(report: Report) -> Report:
    """Sections a producer still put in `meta` (schema-1 keys: dtype_map, env, compare, plots,
    tables) as typed sections; a report without such keys comes back as it is."""
    if not any(key in report.meta for key in LEGACY_META_KEYS):
        return report
    out = copy.copy(report)
    out.meta = dict(report.meta)
    out.sections = [*sections_from_meta(out.meta), *report.sections]
    return out


def present(report: Report) -> Report:
    """What every output shows, computed once before any renderer reads it (commands/_output.emit,
    Report's display, the integrations): schema-1 meta sections typed, each finding's root cause
    set (causes.group_by_cause), no snippet naming what the user's code lacks at its place
    (in_user_names), each fix with a place in a user file carrying its edits, fixes with edits ahead
    of advice and a fix known to fail never first (patching.shown.attach_edits), and every fix
    labelled (label_fixes). Renderers only read the result."""
    from .patching.attach import attach_edits

    return label_fixes(attach_edits(in_user_names(group_by_cause(lift_meta_sections(report)))))


def _script(report: Report) -> str | None:
    """The script a `run` report ran (its first word: `run -m` has none)."""
    program = report.meta.get("program") if report.tool == "run" else None
    head = program.split(" ", 1)[0] if isinstance(program, str) else ""
    return head if head.endswith(".py") else None


def in_user_names(report: Report) -> Report:
    """Each fix whose snippet names what the user's file lacks at its place as advice only, labelled
    so (remedies.in_user_names); a report whose snippets all resolve comes back as it is."""
    script = _script(report)
    findings = []
    for f in report.findings:
        fixes = [remedies.in_user_names(fix, script) for fix in f.fixes]
        findings.append(f if fixes == f.fixes else dataclasses.replace(f, fixes=fixes))
    if all(a is b for a, b in zip(findings, report.findings, strict=True)):
        return report
    return _with_findings(report, findings)


def label_fixes(report: Report) -> Report:
    """Every fix carries a verification label: one no back-end of the verifier labelled gets
    "not verified (why)" (verifying/contract.py); a report whose fixes all have one comes back as it is."""
    if all(fix.verification for f in report.findings for fix in f.fixes):
        return report
    findings = [
        dataclasses.replace(
            f,
            fixes=[
                fix
                if fix.verification
                else dataclasses.replace(fix, verification=unverified_label(fix, untried_reason(report.tool)))
                for fix in f.fixes
            ],
        )
        for f in report.findings
    ]
    return _with_findings(report, findings)


def drop_codes(report: Report, codes: Sequence[str]) -> Report:
    """The report less the findings whose family code is one of `codes` (`--ignore`, the config)."""
    unwanted = set(codes)
    return _with_findings(report, [f for f in report.findings if f.code not in unwanted])


def _own(f: Finding) -> Finding:
    """A copy of `f` that a processor may change (count, data, location, message) without touching
    the input report; the operands, fixes and evidence, which no processor changes, are shared."""
    return dataclasses.replace(f, data=copy.deepcopy(f.data), location=copy.copy(f.location))


def module_pattern(path: str) -> str:
    """`layers.3.mlp` → `layers.*.mlp`: one finding for a repeated block."""
    return _INDEX.sub("*", path)


def fold_repeated_blocks(report: Report, pattern: Callable[[str], str] = module_pattern) -> Report:
    """One finding per mismatch and repeated block: `layers.*.q_proj` ×32, the first one kept.

    Groups by `Finding.key()` with the module path generalised by `pattern` and the message
    (which names the module) left out."""
    kept: dict[tuple, Finding] = {}
    out: list[Finding] = []
    for original in report.findings:
        f = _own(original)
        module = f.location.module if f.location else None
        code, _, op, operands, _ = f.key()
        key = (code, pattern(module) if module else module, op, operands)
        first = kept.get(key)
        if first is None:
            kept[key] = f
            out.append(f)
            continue
        first.count += f.count
        modules = first.data.setdefault("modules", [first.location.module if first.location else None])
        if module not in modules:
            modules.append(module)
    for f in out:
        modules = f.data.get("modules", [])
        if len(modules) > 1:
            f.message += f"  (also in {len(modules) - 1} more: {pattern(modules[0])})"
    result = copy.copy(report)
    result.meta, result.sections, result.findings = dict(report.meta), list(report.sections), out
    return result


def tag_rank(report: Report, rank: int) -> Report:
    """The report of one rank of a distributed run: meta["rank"] and every finding's location.rank."""
    findings = [_own(f) for f in report.findings]
    for f in findings:
        if f.location is not None:
            f.location.rank = rank
    out = _with_findings(report, findings)
    out.meta["rank"] = rank
    return out


_RANK_CODE = RANK_DIVERGENCE


def report_rank(report: Report, default: int) -> int:
    """The rank a report came from: meta["rank"], else the rank its findings carry, else `default`."""
    rank = report.meta.get("rank")
    if isinstance(rank, int):
        return rank
    for f in report.findings:
        if f.location and f.location.rank is not None:
            return f.location.rank
    return default


def _ranks_text(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def _ranks_label(ranks: Sequence[int]) -> str:
    """'rank 2' / 'ranks 0, 1, 3'."""
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {_ranks_text(ranks)}"


def _what(f: Finding) -> str:
    where = f" in '{f.location.module or '<root>'}'" if f.location and f.location.module is not None else ""
    dtypes = ", ".join(f"{o.role} {o.dtype}" for o in f.operands if o.dtype)
    return f"{f.code}{where}" + (f" ({dtypes})" if dtypes else "")


def merge_ranks(reports: Sequence[Report], ranks: Sequence[int] | None = None) -> Report:
    """One report for the whole run: identical findings folded across ranks (their ranks kept in
    `data["ranks"]`, or `location.rank` when only one rank saw it), plus a `rank-divergence`
    finding, listed first, for each finding or module dtype that not every rank shares."""
    if ranks is None:
        ranks = [report_rank(r, i) for i, r in enumerate(reports)]
    world = sorted(set(ranks))
    merged = Report(tool="merge", meta={"ranks": world, "world_size": len(world)})
    tools = sorted({r.tool for r in reports if r.tool})
    if tools:
        merged.meta["tools"] = tools

    folded = Report()  # Report.add: the one fold of identical findings, here across ranks
    ranks_of: dict[int, set[int]] = {}
    for rank, report in zip(ranks, reports, strict=True):
        for f in report.findings:
            if f.code == _RANK_CODE:
                continue  # a previous merge's verdict; recomputed below
            ranks_of.setdefault(id(folded.add(_own(f))), set()).add(rank)
    groups = [(f, ranks_of[id(f)]) for f in folded.findings]

    divergences = _finding_divergences(groups, world)
    dtype_map, map_divergences = _merge_dtype_maps(reports, ranks, world)
    for f in (*divergences, *map_divergences):
        merged.add(f)
    for f, seen in groups:
        seen_sorted = sorted(seen)
        f.data = {**f.data, "ranks": seen_sorted}
        if f.location is None:
            f.location = Location()
        f.location.rank = seen_sorted[0] if len(seen_sorted) == 1 else None
        merged.add(f)
    if dtype_map.modules:
        merged.sections.append(dtype_map)
    return merged


def _split(seen: set[int], world: list[int]) -> tuple[list[int], list[int], bool]:
    """(odd ranks, the others, whether the odd ones are those that saw it)."""
    have = sorted(seen)
    lack = [r for r in world if r not in seen]
    if len(have) <= len(lack):
        return have, lack, True
    return lack, have, False


def _finding_divergences(groups, world: list[int]) -> list[Finding]:
    out = []
    if len(world) < 2:
        return out
    for f, seen in groups:
        if len(seen) == len(world):
            continue
        odd, others, odd_saw = _split(seen, world)
        if odd_saw:
            message = f"{_ranks_label(odd)} hit {_what(f)}; {_ranks_label(others)} did not"
        else:
            message = f"{_ranks_label(odd)} did not hit {_what(f)} that {_ranks_label(others)} hit"
        loc = copy.deepcopy(f.location) if f.location else Location()
        loc.rank = odd[0] if len(odd) == 1 else None
        out.append(
            catalog.finding(
                _RANK_CODE,
                names={"ranks": _ranks_text(odd), "dtype": _model_dtype_snippet(f)},
                message=message,
                location=loc,
                operands=copy.deepcopy(f.operands),
                evidence=[
                    Evidence(text=f"rank {r}: {'saw' if r in seen else 'did not see'} {f.code}")
                    for r in world
                ],
                data={"ranks": odd, "others": others, "finding": f.code},
            )
        )
    return out


def _model_dtype_snippet(f: Finding) -> str | None:
    for o in f.operands:
        if o.role in ("weight", "bias") and o.dtype:
            return f"torch.{o.dtype}"
    return None


def _merge_dtype_maps(
    reports: Sequence[Report], ranks: Sequence[int], world: list[int]
) -> tuple[DtypeMap, list[Finding]]:
    """Union of the per-rank dtype maps, and a divergence for each module whose dtypes differ."""
    per_module: dict[str, dict[int, frozenset[str]]] = {}
    types: dict[str, str] = {}
    for rank, report in zip(ranks, reports, strict=True):
        for entry in report_map(report):
            types.setdefault(entry.path, entry.type)
            per_module.setdefault(entry.path, {})[rank] = frozenset(entry.dtypes)
    merged = DtypeMap()
    findings: list[Finding] = []
    for module, by_rank in per_module.items():
        union = sorted(set().union(*by_rank.values()))
        merged.modules.append(ModuleDtypes(module, types.get(module, ""), {d: 1 for d in union}))
        variants: dict[frozenset[str], list[int]] = {}
        for rank, dtypes in by_rank.items():
            variants.setdefault(dtypes, []).append(rank)
        if len(variants) < 2 or len(by_rank) < 2:
            continue
        majority = max(variants.items(), key=lambda kv: (len(kv[1]), -min(kv[1])))[0]
        for dtypes, odd in variants.items():
            if dtypes == majority:
                continue
            others = sorted(r for r in by_rank if r not in odd)
            findings.append(
                catalog.finding(
                    _RANK_CODE,
                    names={"ranks": _ranks_text(sorted(odd))},
                    message=(
                        f"{_ranks_label(sorted(odd))}: module '{module or '<root>'}' holds "
                        f"{', '.join(sorted(dtypes)) or 'no tensors'}; {_ranks_label(others)}: "
                        f"{', '.join(sorted(majority)) or 'no tensors'}"
                    ),
                    location=Location(
                        module=module,
                        module_type=types.get(module) or None,
                        rank=min(odd) if len(odd) == 1 else None,
                    ),
                    data={"ranks": sorted(odd), "others": others, "module": module},
                )
            )
    return merged, findings
