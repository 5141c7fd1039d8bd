"""From a report's root causes to edits of the user's own files: candidates per cause, best first.

Each root cause gets a list of `Candidate`s (one small change each); the replay (verify.py) keeps the
first whose re-run passes. Everything is derived from what the report holds: the root origin's kind,
file:line and name, the operands' dtypes, the module path, the user's call line (`your_code`).
Library files are never edited: a root inside a library becomes an edit at the user's call site.
No torch import.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from collections.abc import Callable, Iterator

from ..catalog.errors import LOAD_FP32
from ..causes import by_cause, group_by_cause, root_origin
from ..dtypes import FLOATS
from ..editing import finders as find
from ..editing.array_cast import astype_edit
from ..editing.fix_edits import shown_path
from ..editing.source import FACTORIES, Edit, Source, add_kwarg, call_name, cast_expr, castable
from ..editing.user_files import is_user_file
from ..report import Finding, Operand, Origin, Report
from ..tracing.casts import INHERITING, RAISING_METHODS
from . import autocast_edits, bindings, islands, module_edits, shown, targets, undone
from . import usage_edits as usage
from .candidates import Candidate, Cause
from .targets import LOW_NAMES


class Planner:
    """Reads each user file once and turns findings into candidates."""

    def __init__(
        self,
        user_file: Callable[[str | None], bool] = is_user_file,
        home: str | None = None,
        since_ns: int | None = None,
        overlay: dict[str, Source] | None = None,
    ) -> None:
        self.user_file = user_file
        self.home = home  # check: the factory's file, where modules are built when no call site shows
        # when the program started (time.time_ns()): a file written since is not the one that ran,
        # and its line numbers are not the run's; it is never edited
        self.since_ns = since_ns
        self.changed: list[str] = []
        # a file's text as an earlier round of edits left it (patching.propose's chain), read for it
        self.sources: dict[str, Source | None] = dict(overlay or {})

    def source(self, path: str | None) -> Source | None:
        if not self.user_file(path):
            return None
        assert path is not None
        path = shown_path(path)  # one key a file: a report names it relative, a fix's edit absolute
        if path not in self.sources:
            if self._changed_since(path):
                self.changed.append(path)
                self.sources[path] = None
                return None
            try:
                src = Source.read(path)
                src.tree  # noqa: B018 (parse now: a file that does not parse is not edited)
                self.sources[path] = src
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                self.sources[path] = None
        return self.sources[path]

    def _changed_since(self, path: str) -> bool:
        try:
            return self.since_ns is not None and os.stat(path).st_mtime_ns > self.since_ns
        except OSError:
            return False

    # ---- causes -------------------------------------------------------------------------------
    def plan(self, report: Report) -> list[Cause]:
        causes: list[Cause] = []
        for label, findings in by_cause(group_by_cause(report)):
            cause = Cause(label or findings[0].title)
            seen: set[tuple] = set()
            for f in findings:
                for cand in map(self.with_import, self.in_lineage_order(f)):
                    key = tuple(sorted((e.path, e.start, e.end, e.text) for e in cand.edits))
                    if cand.edits and key not in seen:
                        seen.add(key)
                        cause.candidates.append(cand)
            if cause.candidates:
                causes.append(cause)
        return causes

    def with_import(self, cand: Candidate) -> Candidate:
        """The candidate plus `import torch` in each file it writes `torch.` into that lacks it."""
        edits = self.with_import_edits(cand.edits)
        return dataclasses.replace(cand, edits=edits) if len(edits) != len(cand.edits) else cand

    def with_import_edits(self, edits: list[Edit]) -> list[Edit]:
        extra = []
        for path in dict.fromkeys(e.path for e in edits):
            src = self.sources.get(path)
            if src is not None and not find.binds_torch(src) and any("torch." in e.text for e in edits):
                extra.append(find.import_torch(src))
        return [*edits, *extra]

    def in_lineage_order(self, f: Finding) -> list[Candidate]:
        """The structural candidates (built root first) with the report's shown fixes, pasted, merged
        in: a shown fix goes before the first structural candidate that edits later in the odd dtype's
        lineage (earliest birth first); one that states no place after them, one whose replay the tool
        saw fail last."""
        ranks = shown.lineage(f)
        out = [(-1 if c.first else self.edits_rank(ranks, c), c) for c in self.candidates(f)]
        out.sort(key=lambda rc: rc[0] >= 0)  # those tried first, the rest in their order
        failed: list[Candidate] = []
        for fix in shown.shown_fixes(f, self.source, self.births(f)):
            broad = fix.fix is not None and fix.fix.title == LOAD_FP32.title
            cand = Candidate(fix.title, [fix.edit, *fix.more], broad=broad)
            if fix.failed:
                failed.append(cand)
                continue
            # a fix pasted where it states no place comes after every other
            at = shown.rank(ranks, fix.edit.path, fix.line) if fix.stated else shown.UNKNOWN + 1
            i = next((i for i, (r, _) in enumerate(out) if r > at), len(out))
            out.insert(i, (at, cand))
        return [c for _, c in out] + failed

    def births(self, f: Finding) -> list[Origin]:
        """Where the odd operands' dtypes were born, in user files, tensors first: each root origin,
        else (a root inside a library) the user's line that called it, then where the operand entered."""
        target = targets.target_dtype(f)
        odd = [o for o in f.operands if o.dtype in FLOATS and o.dtype != target and o.origin is not None]
        odd.sort(key=_held)
        out: list[Origin] = []
        for o in odd:
            assert o.origin is not None
            root = root_origin(o.origin)
            todo = [root]
            while todo:  # breadth first: the nearest user line to the birth
                origin = todo.pop(0)
                if origin.line is not None and self.source(origin.file) is not None:
                    out.append(origin)
                    break
                todo.extend(origin.chain)
            out.append(o.origin)
        return [r for r in out if r.line is not None and self.source(r.file) is not None]

    def edits_rank(self, ranks: dict[tuple[str, int], int], cand: Candidate) -> int:
        """The earliest lineage rank of the lines the candidate edits."""
        found = [shown.UNKNOWN]
        for e in cand.edits:
            src = self.sources.get(e.path)
            if src is not None:
                found.append(shown.rank(ranks, e.path, shown.edit_line(src, e)))
        return min(found)

    def candidates(self, f: Finding) -> Iterator[Candidate]:
        if f.code == "autocast-half-conflict":
            yield from usage.autocast(self, f)
            return
        if f.data.get("misuse") == "clip-before-unscale":
            yield from usage.unscale_before_clip(self, f)
            return
        yield from autocast_edits.off_regions(self, f)  # a region for another device: off here
        yield from autocast_edits.candidates(self, f)  # float32 where autocast chose the low dtype
        yield from autocast_edits.custom_fwd_inputs(self, f)  # a custom Function's inputs under autocast
        yield from islands.unsupported(self, f)  # an op the half dtype does not support: float32 around it
        target = targets.target_dtype(f)
        if target is None:
            return
        # the half dtype the operands show, the consumer's (by the report's evidence), and an in-place
        # op's destination's, which keeps its own
        for dtype in dict.fromkeys([target, targets.intended_dtype(f), targets.destination_dtype(self, f)]):
            if dtype is not None:
                yield from (dataclasses.replace(c, dtype=c.dtype or dtype) for c in self.toward(f, dtype))

    def toward(self, f: Finding, target: str) -> Iterator[Candidate]:
        """The candidates that give the finding's odd operands `target`."""
        odd = [o for o in f.operands if o.dtype in FLOATS and o.dtype != target]  # never an index
        tensors = [o for o in odd if not _held(o)]
        params = [o for o in odd if _held(o)]
        for o in odd:
            yield from undone.left_out(self, o, target)
        if tensors:
            yield from undone.moved_on_the_way(self, f, target)
        for o in tensors:
            yield from undone.from_helper(self, f, o, target)
        for o in tensors:
            yield from self.cast_tensor(o, target)
        for o in tensors:
            yield from self.at_use(f, o, target)
        for o in tensors:  # last: an explicit upcast is usually deliberate
            yield from self.drop_upcast(o)
        for o in params:
            yield from self.at_birth(o, target)
            yield from module_edits.convert_module(self, f, o, target)
        # the other way round: a float32 model fed a half tensor by mistake
        wide = {o.dtype for o in f.operands if _held(o) and o.dtype and o.dtype not in LOW_NAMES}
        if len(wide) == 1 and not params:
            other = wide.pop()
            for o in f.operands:
                if not _held(o) and o.dtype in FLOATS and o.dtype != other:
                    yield from self.cast_tensor(o, other)
        # the odd local cast where the failing function last assigned it (first when float32 on purpose)
        yield from bindings.last_assigned(self, f, target)

    # ---- a tensor: cast where it is made or enters --------------------------------------------
    def cast_tensor(self, operand: Operand, dtype: str) -> Iterator[Candidate]:
        if operand.origin is None:
            return
        root = root_origin(operand.origin)
        own = operand.origin
        if own is not root and own.kind == "op" and (own.op or "").rsplit(".", 1)[-1] in INHERITING:
            for cand in self.at_origin(own, dtype):
                yield Candidate(cand.title, cand.edits, first=True)
        if own is not root and own.kind == "cast":  # `x.to(y.dtype)`: the line chose y's dtype
            yield from self.borrowed_dtype(own, dtype)
        if root.kind == "value":  # `dtype = torch.float32` read by `torch.arange(n, dtype=dtype)`
            yield from undone.at_value(self, root, dtype)
            root = undone.made_with_value(operand.origin) or root
        made = next((c for c in root.chain if c.kind != "call"), None) if root.kind == "input" else None
        for origin in (made, root) if made is not None else (root,):
            yield from self.at_origin(origin, dtype, direct=origin is operand.origin or root.kind == "input")
        if root.kind == "input":
            yield from self.at_call_argument(root, dtype)

    def at_origin(self, origin: Origin, dtype: str, direct: bool = True) -> Iterator[Candidate]:
        """Edits where `origin` was made; `direct`: it is the failing operand itself (an accumulator
        made in float32 and written into), not a tensor the operand was computed from."""
        src = self.source(origin.file)
        if src is not None and origin.line is not None and origin.kind == "attribute":
            yield from self.as_buffer(src, origin)
            return
        if src is not None and origin.line is not None and origin.kind == "array":  # a NumPy array's birth
            edit = astype_edit(src, origin.line, dtype)
            if edit is not None:
                yield Candidate(f"make `{origin.name}` {dtype} where it is assigned", [edit])
            return
        if src is None or origin.line is None or origin.kind not in ("op", "cast", "promotion", "output"):
            return
        where = f"{origin.file}:{origin.line}"
        name = origin.name or "the tensor"
        op = (origin.op or "").rsplit(".", 1)[-1]
        calls = [c for c in find.calls_on(src, origin.line) if call_name(c.func).rsplit(".", 1)[-1] == op]
        if not direct and calls and _lowers(dtype, find.explicit_dtype(calls[0])):
            return  # maths begun with `dtype=torch.float32` on purpose (tables, phases): not lowered
        if origin.kind == "op":  # made with `dtype=dtype`, a parameter its caller left at the default
            yield from undone.defaulted_parameter(self, origin, dtype)
        if origin.kind == "op" and (op in FACTORIES or op in INHERITING) and calls:
            # the tensor whose device the factory takes (`device=x.device`): its dtype first, which
            # follows the data when the model runs in another precision
            partner = find.device_partner(calls[0])
            if partner and len(calls) == 1:
                edit = add_kwarg(src, calls[0], "dtype", f"{partner}.dtype")
                if edit is not None:
                    yield Candidate(f"create `{name}` in the dtype of `{partner}` ({where})", [edit])
            # every call of the factory on the line (`meshgrid(linspace(..), linspace(..))`): one birth each
            edits = [
                e for e in (add_kwarg(src, c, "dtype", f"torch.{dtype}") for c in calls) if e is not None
            ]
            if edits:
                yield Candidate(f"create `{name}` as {dtype} with dtype= ({where})", edits)
        if origin.kind == "cast" and op in RAISING_METHODS:
            return  # `x.float().to(half)` only undoes the upcast: drop_upcast says so, last
        value = find.assigned_value(src, origin.line, origin.name)
        if value is not None and not find.already_cast(value, dtype):
            if castable(value):
                yield Candidate(
                    f"cast `{name}` to {dtype} where it is made ({where})", [cast_expr(src, value, dtype)]
                )
        elif calls and origin.kind != "output":
            yield Candidate(
                f"cast the {origin.op} result to {dtype} ({where})", [cast_expr(src, calls[0], dtype)]
            )

    def borrowed_dtype(self, origin: Origin, dtype: str) -> Iterator[Candidate]:
        """A cast that takes another tensor's dtype (`z.to(embeds.dtype)`, `z.type_as(embeds)`),
        where that dtype is not the one the tensor's consumer needs: the cast given `dtype` itself,
        changing this tensor alone."""
        src = self.source(origin.file)
        if src is None or origin.line is None:
            return
        for call in find.calls_on(src, origin.line):
            borrowed = find.borrowed_dtype(call)
            if borrowed is None or call.lineno != origin.line:
                continue
            start, end = src.span(borrowed)
            text = f"torch.{dtype}"
            if isinstance(call.func, ast.Attribute) and call.func.attr == "type_as":  # `.type_as(y)` whole
                start, end, text = src.span(call.func.value)[1], src.span(call)[1], f".to(torch.{dtype})"
            other = src.segment(borrowed)
            other = other if other.endswith(".dtype") else f"{other}.dtype"
            yield Candidate(
                f"cast `{origin.name or 'the tensor'}` to {dtype}, not to `{other}` ({origin.file}:{origin.line})",
                [Edit(src.path, start, end, text)],
                first=True,
            )
            return

    def drop_upcast(self, operand: Operand) -> Iterator[Candidate]:
        """Remove the `.float()` / `.double()` that made the operand wide (`x = x.float()` → `x = x`)."""
        origin = root_origin(operand.origin) if operand.origin is not None else None
        src = self.source(origin.file if origin is not None else None)
        if origin is None or src is None or origin.kind != "cast" or origin.line is None:
            return
        op = (origin.op or "").rsplit(".", 1)[-1]
        calls = [c for c in find.calls_on(src, origin.line) if call_name(c.func).rsplit(".", 1)[-1] == op]
        if op in RAISING_METHODS and calls and not calls[0].args and not calls[0].keywords:
            receiver = calls[0].func.value  # type: ignore[attr-defined]
            start, end = src.span(calls[0])
            what = f"`{src.segment(receiver)}` {origin.dtype}"
            yield Candidate(
                f"drop the .{op}() that made {what} ({origin.file}:{origin.line})",
                [Edit(src.path, start, end, src.segment(receiver))],
            )

    def as_buffer(self, src: Source, origin: Origin) -> Iterator[Candidate]:
        """A plain tensor attribute that a module-wide cast skipped: register it as a buffer where it is
        set (`self.NAME = V` / `setattr(self, "NAME", V)`), so `.to()`/`.half()` convert it with the model."""
        attr = (origin.name or "").rsplit(".", 1)[-1]
        found = find.attribute_set(src, origin.line or 0, attr) if attr.isidentifier() else None
        if found is None:
            return
        stmt, owner, value = found
        if not owner.isidentifier() or not find.in_method(src, stmt.lineno, owner):
            return
        start = src.offset(stmt.lineno, stmt.col_offset)
        end = src.offset(stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)
        text = f'{owner}.register_buffer("{attr}", {src.segment(value)}, persistent=False)'
        yield Candidate(
            f"register `{attr}` as a buffer where it is set ({src.path}:{stmt.lineno}), so that the "
            "model's .to()/.half() convert it",
            [Edit(src.path, start, end, text)],
        )

    def at_call_argument(self, root: Origin, dtype: str) -> Iterator[Candidate]:
        """The model input `root` at the user's call: cast its variable where it was assigned, else the
        argument itself."""
        src = self.source(root.file)
        if src is None or root.line is None:
            return
        arg = find.argument(find.model_call(src, root.line), root.name)
        if arg is None:
            return
        where = f"{root.file}:{root.line}"
        if isinstance(arg, ast.Name):
            value = find.last_assignment(src, arg.id, root.line)
            if value is not None and not castable(value):
                return  # a Python list (tuple, dict) has no .to
            if value is not None and not find.already_cast(value, dtype):
                line = f"{root.file}:{value.lineno}"
                yield Candidate(
                    f"cast `{arg.id}` to {dtype} where it is made ({line})", [cast_expr(src, value, dtype)]
                )
        if castable(arg):
            yield Candidate(
                f"cast `{src.segment(arg)}` to {dtype} where it enters the model ({where})",
                [cast_expr(src, arg, dtype)],
            )

    def at_birth(self, operand: Operand, dtype: str) -> Iterator[Candidate]:
        """A parameter or buffer made from a tensor of the user's (`nn.Parameter(torch.zeros(n))`,
        `weight=torch.as_tensor(arr)`): make that tensor in the right dtype."""
        made = next((c for c in operand.origin.chain if c.kind == "op"), None) if operand.origin else None
        if made is not None and made.file and made.dtype == operand.dtype:
            yield from self.at_origin(made, dtype)

    def at_use(self, f: Finding, operand: Operand, dtype: str) -> Iterator[Candidate]:
        """Cast the operand where the failing line of the user's code passes it on (`self.out(y)` →
        `self.out(y.to(torch.float16))`): the exit of a region kept wide on purpose (`.float()` maths,
        an autocast-disabled block) back to the consumer's dtype."""
        loc, name = f.location, operand.origin.name if operand.origin is not None else None
        src = self.source(loc.file if loc is not None else None)
        if src is None or loc is None or loc.line is None:
            return
        module = (loc.module or "").rsplit(".", 1)[-1]
        for call in find.calls_on(src, loc.line):
            callee = call_name(call.func)
            named = [a for a in [*call.args, *(k.value for k in call.keywords)] if _is_name(a, name)]
            # the failing module's input: its call's first argument (the operand's name may be older)
            if not named and module and callee.rsplit(".", 1)[-1] == module and call.args:
                named = [call.args[0]] if isinstance(call.args[0], (ast.Name, ast.Attribute)) else []
            if named and castable(named[0]):
                arg = named[0]
                what, where = src.segment(arg), f"{src.path}:{arg.lineno}"
                if _weighs(f, module, dtype) and callee.rsplit(".", 1)[-1] == module:
                    # the consumer's own weight names the dtype: the cast follows the module when
                    # it is converted again (`model.float()` for evaluation), where a literal would not
                    yield Candidate(
                        f"cast `{what}` to the dtype of `{callee}` where it enters it ({where})",
                        [cast_expr(src, arg, dtype, to=f"{callee}.weight.dtype")],
                    )
                yield Candidate(
                    f"cast `{what}` to {dtype} where it enters `{callee or 'the call'}` ({where})",
                    [cast_expr(src, arg, dtype)],
                )
                return

    def model_input_site(self, f: Finding) -> tuple[Source, int] | None:
        """The user's line that called the outermost model (the line its inputs came in at): module
        paths are relative to that model."""
        todo = [o.origin for o in f.operands if o.origin is not None]
        while todo:
            origin = todo.pop(0)
            src = self.source(origin.file) if origin.kind == "input" else None
            if src is not None and origin.line is not None and find.model_call(src, origin.line) is not None:
                return src, origin.line
            todo.extend(origin.chain)
        return None

    def call_site(self, f: Finding) -> tuple[Source, int] | None:
        """The user's line that called into the model (the finding's `your_code`, else its location)."""
        return next(iter(self.user_places(f)), None)

    def user_places(self, f: Finding) -> list[tuple[Source, int]]:
        """The finding's `your_code` and its location, those in a user file, in that order."""
        places = [f.data.get("your_code")]
        if f.location is not None and f.location.file:
            places.append(f"{f.location.file}:{f.location.line}")
        found = []
        for place in places:
            if not isinstance(place, str) or ":" not in place:
                continue
            path, _, line = place.rpartition(":")
            src = self.source(path)
            if src is not None and line.isdigit():
                found.append((src, int(line)))
        return found


def plan(report: Report, user_file: Callable[[str | None], bool] = is_user_file) -> list[Cause]:
    """The candidate edits for each root cause of `report` that lies in (or is called from) user files."""
    return Planner(user_file).plan(report)


# ---- helpers --------------------------------------------------------------------------------------
def _held(o: Operand) -> bool:
    return o.origin is not None and o.origin.kind in ("parameter", "buffer")


def _weighs(f: Finding, module: str, dtype: str) -> bool:
    """The failing module's own `weight` is an operand of `dtype` (`self.out(h)`: `out.weight`)."""
    return bool(module) and any(
        o.origin is not None
        and o.origin.kind == "parameter"
        and o.dtype == dtype
        and (o.origin.name or "").split(".")[-2:] == [module, "weight"]
        for o in f.operands
    )


def _is_name(node: ast.expr, name: str | None) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _lowers(target: str, written: str | None) -> bool:
    """Casting a tensor made with `dtype=WRITTEN` (float32/float64, on purpose) to half `target`."""
    return target in LOW_NAMES and written in ("float32", "float64", "float", "double")
