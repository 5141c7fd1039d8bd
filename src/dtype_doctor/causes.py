"""Root causes: findings that share where the wrong dtype came from form one cause.

`group_by_cause` is a pure `Report -> Report` processor: every finding keeps its place in
`report.findings` (JSON keeps them all); those that share a root origin get the same
`root_cause` text, e.g. "float32 `inputs_embeds` (train.py:15) → 6 findings in 6 modules".
Renderers show one cause per root and fold the rest under it. No torch import.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from . import remedies
from .catalog.shared_remedies import CAST_AT_BIRTH, MAKE_AT_BIRTH
from .editing.array_cast import astype_at
from .editing.birth_line import made_in
from .report import Finding, Fix, Operand, Origin, Report
from .tracing.files import shown_library_file

OWN_CAST = "dtype-doctor fix"  # the op name of watch(mode="fix")'s casts


def _odd_operands(f: Finding) -> list[Operand]:
    """The operands whose dtype is not the one the op needed (all of them when unknown)."""
    expected = f.data.get("expected_dtype")
    named = f.data.get("odd_roles")  # an integer made where a float was wanted (a loss target)
    if named:
        return [o for o in f.operands if o.role in named] or f.operands
    odd = [
        o
        for o in f.operands
        if expected and o.dtype and o.dtype != expected and (_floating(o.dtype) or not _floating(expected))
    ]
    return odd or [o for o in f.operands if o.origin is not None and o.origin.kind != "parameter"]


def _floating(dtype: str | None) -> bool:
    """A floating dtype's name (an index or mask operand is never the odd one)."""
    return bool(dtype) and str(dtype).startswith(("float", "bfloat", "complex"))


def _library_line(origin: Origin) -> bool:
    return bool(origin.file) and shown_library_file(origin.file or "")


def _user_ancestor(origin: Origin, depth: int = 0) -> Origin | None:
    """The nearest origin made at a line of the user's own code, with the same dtype."""
    for c in origin.chain:
        if c.kind == "call":
            continue
        if c.dtype == origin.dtype and c.file and not _library_line(c) and c.op != OWN_CAST:
            return c
        found = _user_ancestor(c, depth + 1) if depth < 8 and c.dtype == origin.dtype else None
        if found is not None:
            return found
    return None


def root_origin(origin: Origin, expected: str | None = None) -> Origin:
    """Follow an origin's chain to the tensor that first had this dtype (skipping call sites); a
    root at a library line (its `Tensor.to`) gives way to the user's line that made the tensor.
    `expected`: the dtype the op needed; a promotion of two operands narrower than its result
    (float16 with bfloat16 gives float32) goes on to the one of them that is not `expected`."""
    found = _root_origin(origin, expected)
    if found.kind in ("op", "cast", "promotion") and _library_line(found):
        return _user_ancestor(found) or found
    return found


# a complex tensor has its parts' precision: a spectrum's magnitude took its dtype where the signal did
_REAL = {"complex32": "float16", "complex64": "float32", "complex128": "float64"}


def _root_origin(origin: Origin, expected: str | None = None) -> Origin:
    current = origin
    for _ in range(16):
        if current.op == OWN_CAST:  # the tool's own fix-mode cast is never a cause: what it cast is
            before = [c for c in current.chain if c.kind != "call"]
            if not before:
                return current
            current = before[0]
            continue
        precision = _REAL.get(current.dtype or "", current.dtype)
        parents = [
            c for c in current.chain if c.kind != "call" and _REAL.get(c.dtype or "", c.dtype) == precision
        ]
        if current.kind == "promotion" and not parents and expected:
            parents = [c for c in current.chain if c.kind != "call" and c.dtype not in (None, expected)]
        if current.kind == "input" and parents and parents[0].kind in ("op", "cast"):
            current = parents[0]  # an input born where it was made, not where it was passed
            continue
        if current.kind in ("input", "output") and not (parents and parents[0].kind == "promotion"):
            return current  # a named tensor the user handed over (a module's output): the place to act
        if current.kind in ("parameter", "buffer", "attribute") and current.file:
            return current  # a parameter's birth: where its dtype entered the model
        if not parents:
            return current
        current = parents[0]
    return current


def _origin_label(origin: Origin) -> str:
    if origin.kind in ("op", "cast") and origin.name:
        text = f"{origin.dtype or '?'} `{origin.name}` made by {origin.op}"
    elif origin.kind == "output":
        text = f"{origin.dtype or '?'} output of {origin.op}" + (f" `{origin.name}`" if origin.name else "")
    else:
        text = f"{origin.dtype or '?'} `{origin.name or origin.op or origin.kind}`"
    if origin.file:
        text += f" ({origin.file}:{origin.line})" if origin.line is not None else f" ({origin.file})"
    elif origin.module:
        text += f" in '{origin.module}'"
    before = next((c for c in origin.chain if c.kind != "call"), None)
    if origin.kind == "input" and before is not None and before.file:
        text += f", made by {before.op or before.kind} at {before.file}:{before.line}"
    read = next(
        (c for c in origin.chain if c.kind == "call" and (c.name or "").startswith("read without")), None
    )
    if read is not None:  # held wide on purpose: the read into the low computation is the place
        text += f", {read.name} at {read.file}:{read.line}"
    handed = _farthest_value(origin) if origin.kind in ("parameter", "buffer", "cast") else None
    if handed is not None:  # a held tensor shared from a cache, a cast to a dtype written elsewhere
        text += f", through {handed.name} at {handed.file}:{handed.line}"
    yours = next((c for c in origin.chain if c.kind == "call" and c.file), None)
    if yours is not None and _library_line(origin):  # born in a library, called from this line
        text += f", from your line {yours.file}:{yours.line}"
    return text


def _farthest_value(origin: Origin) -> Origin | None:
    """The last of the value sites (a dtype constant, a cache key) an origin's chain goes through."""
    found = next((c for c in origin.chain if c.kind == "value"), None)
    while found is not None:
        deeper = next((c for c in found.chain if c.kind == "value"), None)
        if deeper is None:
            return found
        found = deeper
    return None


def root_fix(root: Origin, expected: str | None) -> Fix | None:
    """Cast the tensor where the user made it: the one line that fixes every finding of the cause."""
    if root.kind == "array":
        return _array_made_in(root, expected)
    made = root
    if root.kind == "input":
        made = next((c for c in root.chain if c.kind != "call"), root)
    name = made.name if made.kind in ("output", "op", "cast") else None
    if not (name and name.isidentifier()):
        return _made_in(root, expected)
    return remedies.make(CAST_AT_BIRTH, file=made.file, line=made.line, name=name, want=expected)


def _made_in(root: Origin, expected: str | None) -> Fix | None:
    """A tensor with no name of the user's (a factory's result inside an expression, the tensor a
    parameter or buffer was made from): the line that made it, rewritten to make it in `expected`."""
    made = root
    if root.kind in ("parameter", "buffer"):  # `weight=torch.as_tensor(w)`: where its tensor was made
        made = next((c for c in root.chain if c.kind != "call"), root)
    if made.kind != "op" or not made.op or not made.file or made.line is None or not expected:
        return None
    found = made_in(made.file, made.line, made.op, f"torch.{expected}")
    if found is None:
        return None
    what = f"`{root.name}` ({made.op})" if root is not made and root.name else f"the {made.op} result"
    statement, line = found
    return remedies.make(MAKE_AT_BIRTH, file=made.file, line=line, made=statement, what=what, want=expected)


def _array_made_in(root: Origin, expected: str | None) -> Fix | None:
    """A NumPy array a tensor was converted from: made in `expected` where it is assigned."""
    if not expected or not root.file or root.line is None:
        return None
    found = astype_at(root.file, root.line, expected)
    if found is None:
        return None
    statement, line = found
    what = f"the NumPy array `{root.name}`" if root.name else "the NumPy array"
    return remedies.make(MAKE_AT_BIRTH, file=root.file, line=line, made=statement, what=what, want=expected)


def _autocast_key(f: Finding) -> tuple[tuple, str, Fix | None] | None:
    """An fp16 model under bf16 autocast (or the reverse) is one cause wherever it fails: the set-up."""
    params = {o.dtype for o in f.operands if o.origin is not None and o.origin.kind == "parameter"}
    if len(params) != 1:
        return None
    model = params.pop()
    other = "bfloat16" if model == "float16" else "float16"
    where = f.data.get("your_code")
    label = f"a {model} model under {other} torch.autocast" + (f" ({where})" if where else "")
    return ("setup", f.code, model, where), label, None


def _widened(f: Finding) -> str | None:
    """float32 for an op-level overflow (a result float32 holds): the root's tensor made float32
    fixes every op computed from it; offered only where it explains several findings."""
    return "float32" if f.data.get("kind") == "overflow" else None


def _root_key(f: Finding) -> tuple[tuple, str, Fix | None] | None:
    """(identity, label, fix at the root) of the finding's root origin, or None when nothing names one."""
    if f.code == "autocast-half-conflict":
        return _autocast_key(f)
    island = f.data.get("island")
    if isinstance(island, dict) and island.get("label"):  # every island of one model is one cause
        return ("island", island.get("model"), island.get("dtype")), str(island["label"]), None
    for op in _odd_operands(f):
        if op.origin is None or op.origin.kind == "unknown":
            continue
        root = root_origin(op.origin, f.data.get("expected_dtype"))
        if (root.kind == "parameter" and not root.file) or root.kind == "autocast" or root.op == OWN_CAST:
            continue  # a parameter is where it is; autocast's dtype is by design, not a cause
        key = (root.kind, root.name, root.op, root.file, root.line, root.dtype)
        return key, _origin_label(root), root_fix(root, f.data.get("expected_dtype") or _widened(f))
    if f.operands and all(o.origin is None or not o.origin.file for o in f.operands):
        # findings about what modules hold (audit): one per dtype pattern of the same family
        pattern = tuple((o.role, o.dtype) for o in f.operands)
        label = " next to ".join(f"{r} {d}" for r, d in pattern)
        return ("pattern", f.code, pattern), label, None
    return None


def _places(findings: Iterable[Finding]) -> list[str]:
    out: list[str] = []
    for f in findings:
        loc = f.location
        if loc is None:
            continue
        place = f"'{loc.module or '<root>'}'" if loc.module is not None else loc.op
        if place and place not in out:
            out.append(place)
    return out


def _consequences(findings: list[Finding]) -> str:
    places = _places(findings)
    n = sum(f.count for f in findings)
    text = f"{n} finding{'s' if n != 1 else ''}"
    if len(places) > 3:
        return f"{text} in {len(places)} places"
    return f"{text} ({', '.join(places)})" if places else text


def group_by_cause(report: Report) -> Report:
    """A copy of `report` whose findings carry `root_cause`: the root origin of the odd operand,
    shared by every finding that has the same root (audit's same-pattern findings likewise)."""
    groups: dict[tuple, list[int]] = {}
    labels: dict[tuple, str] = {}
    root_fixes: dict[int, Fix] = {}
    for i, f in enumerate(report.findings):
        found = _root_key(f)
        if found is None:
            continue
        key, label, fix = found
        groups.setdefault(key, []).append(i)
        labels.setdefault(key, label)
        if fix is not None and not any(x.title == fix.title for x in f.fixes):
            root_fixes[i] = fix
    for members in groups.values():  # one overflow: its own statement's fix is the narrower edit
        if len(members) == 1 and _widened(report.findings[members[0]]):
            root_fixes.pop(members[0], None)
    causes: dict[int, str] = {}
    for key, members in groups.items():
        if len(members) < 2 and key[0] == "pattern":
            continue
        text = labels[key]
        if key[0] == "pattern":
            text += f" in {sum(report.findings[i].count for i in members)} modules"
        elif len(members) > 1:
            text += f" → {_consequences([report.findings[i] for i in members])}"
        for i in members:
            causes[i] = text
    findings = [
        replace(f, root_cause=causes.get(i), fixes=with_root_fix(f, root_fixes.get(i)))
        for i, f in enumerate(report.findings)
    ]
    return replace(report, findings=findings, meta=dict(report.meta))


def with_root_fix(f: Finding, fix: Fix | None) -> list[Fix]:
    """The root's cast ahead of the unverified fixes; last, and said so, where it would cast down a
    tensor upcast on purpose (`x = x.float()` for a wide region): that lowers intent, and the wide
    region's later maths mixes dtypes again; the cast where its result leaves the region comes first."""
    intended = f.data.get("intended")
    deliberate = intended.get("deliberate") if isinstance(intended, dict) else None
    if fix is not None and f.data.get("partly_converted") and f.fixes:  # the group's one edit stays first
        return [f.fixes[0], *remedies.behind_verified(f.fixes[1:], fix)]
    if fix is None or not (deliberate and fix.file and f"{fix.file}:{fix.line})" in str(deliberate)):
        return remedies.behind_verified(f.fixes, fix)
    if any(x.snippet.strip() == fix.snippet.strip() for x in f.fixes):
        return f.fixes
    title = f"{fix.title}: last resort, it lowers the deliberate upcast made there"
    return [*f.fixes, remedies.revise(fix, title=title)]


def by_cause(report: Report) -> list[tuple[str | None, list[Finding]]]:
    """(cause, findings) in reading order: causes that fold several findings first, errors before
    warnings; a finding with no shared root is its own group (cause None)."""
    order: dict[str, list[Finding]] = {}
    single: list[Finding] = []
    for f in report.findings:
        if f.root_cause:
            order.setdefault(f.root_cause, []).append(f)
        else:
            single.append(f)
    rank = {"error": 0, "warning": 1, "info": 2}

    def worst(fs: list[Finding]) -> int:
        return min(rank.get(f.severity.value, 3) for f in fs)

    grouped: list[tuple[str | None, list[Finding]]] = [(c, fs) for c, fs in order.items()]
    grouped += [(None, [f]) for f in single]
    return sorted(grouped, key=lambda g: (worst(g[1]), g[0] is None))
