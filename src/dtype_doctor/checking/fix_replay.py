"""check's fixes, tried: the dry run replayed on meta with the fix applied, as the user would paste it.

The fixes are written in the user's names: the variable the factory returns (pasted in the factory,
before its `return`), or `model` where the factory is called (`model = build()`). Each of the first few
is applied to a copy of the meta mirror (the factory's own globals in scope, under
`torch.device("meta")`) and the dry run is run again, in strict mode: it stops at the first error
left, so a failing fix costs little; it passes when no error is left. Meta has no values, so the error
against float32 cannot be measured: the verdict says so. This is the meta back-end of the verifier
(verifying/): the replays run in a forked child, or in-process only for library code.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import textwrap
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn

from ..catalog.family_codes import CHECK_INCOMPLETE
from ..report import Finding, Fix, Report, Severity
from ..verifying import isolation
from ..verifying.contract import NO_CODE, NOT_PYTHON, RANK, has_code, not_verified
from ..watching import blame
from ..watching.names import loaded_names
from ..watching.provenance import short_path
from ..watching.snippets import renamed
from .tree_copy import deepcopy_tree

TRIED = 4
BUDGET_S = 1.0  # the replays' time, at least (see verify_top)
PASSES = "verified: the dry run passes with this fix (dtypes only; error vs fp32 not measurable on meta)"
DryRun = Callable[[nn.Module, dict, Report, str], None]  # (model, keyword inputs, report, watch mode)
# the factory a module given to check was built by (the CLI builds it first): fixes use its names
made_by: ContextVar[Any] = ContextVar("made_by", default=None)


def user_name(factory: Any) -> tuple[str, str, dict[str, Any]]:
    """(the model's variable, where a fix is pasted, the globals there) for a factory or a module."""
    fn = factory if inspect.isfunction(factory) else None
    scope = dict(getattr(fn, "__globals__", {}) or {})
    if fn is None:
        return "model", "", scope
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        tree = None
    top = tree.body[0] if tree is not None and tree.body else None
    returned = {ast.unparse(n.value) for n in _own_returns(top)} if top is not None else set()
    if len(returned) == 1 and (name := returned.pop()).isidentifier() and name not in ("torch", "nn", "F"):
        return name, f"in {fn.__name__}(), before `return {name}`", scope
    return "model", f"where you call it: `model = {fn.__name__}()`", scope


def _own_returns(fn: ast.AST) -> list[ast.Return]:
    """The return statements of `fn` itself, not of functions or classes defined inside it."""
    out: list[ast.Return] = []
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def island_fixes(finding: Finding, mirror: nn.Module, name: str, factory: Any) -> list[Fix]:
    """Convert the odd module(s) when the module, not the activation, is the odd one out."""
    path = finding.location.module if finding.location is not None else None
    if path is None:
        return []
    try:
        module = mirror.get_submodule(path)
    except AttributeError:
        return []
    params = {o.dtype for o in finding.operands if o.origin is not None and o.origin.kind == "parameter"}
    data = [o.dtype for o in finding.operands if o.origin is not None and o.origin.kind != "parameter"]
    activation = next((getattr(torch, d, None) for d in data if d and d not in params), None)
    own = {p.dtype for p in module.parameters(recurse=False) if p.is_floating_point()}
    if activation is None or len(own) != 1:
        return []
    have = own.pop()
    if have == activation or blame.majority([mirror]) != activation:
        return []
    paths = blame.islands(mirror, have)
    if not paths or paths == [""]:
        return []
    island = blame.Island(model=name, paths=paths, dtype=have, want=activation)
    file = inspect.getsourcefile(factory) if inspect.isfunction(factory) else None
    target = paths[0].rpartition(".")[2]
    hit = blame._assignment(file, target) if file else None
    if hit is not None:
        island.built = (short_path(file or ""), hit[0], hit[1])
    fixes = [island.fix()]
    made = island.build_fix()
    if made is not None:
        made.why += f" (this line replaces {island.built[0]}:{island.built[1]})" if island.built else ""
        made.dd_replaces = True  # type: ignore[attr-defined]  # pasted over that line, not before return
        fixes.append(made)
    return fixes


def _missing(fix: Fix, name: str, scope: dict[str, Any]) -> list[str]:
    return sorted((loaded_names(fix.snippet) or set()) - {name, "torch", "nn", "F"} - set(scope))


def _with_import(fix: Fix, scope: dict[str, Any]) -> Fix:
    """`import torch` first when the snippet needs torch and the factory's file does not import it."""
    needs = "torch" in (loaded_names(fix.snippet) or set())
    if not needs or "torch" in scope or fix.snippet.startswith("import torch"):
        return fix
    return Fix(
        fix.title, "import torch\n" + fix.snippet, fix.why, fix.language, fix.verified, fix.verification
    )


@contextlib.contextmanager
def _no_nested_verify() -> Iterator[None]:
    """The replayed dry run's own watch session verifies nothing again."""
    from ..verifying.backends import live as watch_verify

    state = watch_verify._replaying
    old = getattr(state, "on", False)
    state.on = True
    try:
        yield
    finally:
        state.on = old


def unreplayable(fix: Fix, name: str, scope: dict[str, Any]) -> str | None:
    """Why the fix cannot be replayed, known before anything runs; None when it can be."""
    if getattr(fix, "dd_input", None) is not None:
        return None
    missing = _missing(fix, name, scope)
    if missing:
        where = ", ".join(f"`{n}`" for n in missing)
        return f"not verified (names {where}, which the factory does not have)"
    try:
        tree = ast.parse(fix.snippet)
    except SyntaxError:
        return "not verified (does not parse)"
    if any(isinstance(n, (ast.With, ast.AsyncWith)) for n in ast.walk(tree)):
        return "not verified (a context to run the model under: check cannot replay your call)"
    return None


def replay(
    fix: Fix,
    mirror: nn.Module,
    name: str,
    scope: dict[str, Any],
    dry_run: DryRun,
    kw: dict,
    last: bool = False,
) -> tuple[bool | None, str]:
    """Apply the fix to a copy of the mirror (an --input fix: to that input) and run the dry run again.

    last: the mirror is not needed after this replay: the fix is applied to it, not to a copy."""
    why_not = unreplayable(fix, name, scope)
    if why_not is not None:
        return None, why_not
    cast = getattr(fix, "dd_input", None)
    if cast is not None:  # (input name, dtype): the dry run again with that input in that dtype
        return _verdict(dry_run, mirror, {**kw, cast[0]: kw[cast[0]].to(cast[1])})
    twin = mirror if last else deepcopy_tree(mirror)
    ns: dict[str, Any] = {**scope, "torch": torch, "nn": nn, name: twin}
    try:
        with torch.device("meta"), torch.no_grad():
            exec(compile(fix.snippet, "<fix>", "exec"), ns)
    except Exception as exc:
        return False, f"fails: the fix itself raised {type(exc).__name__}: {str(exc)[:120]}"
    model = ns.get(name)
    if not isinstance(model, nn.Module):
        return False, f"fails: `{name}` is no longer a module after the fix"
    return _verdict(dry_run, model, kw)


def _verdict(dry_run: DryRun, model: nn.Module, kw: dict) -> tuple[bool | None, str]:
    """Replayed in strict mode, a failing fix fails at its first error; a replay that strict mode
    stopped at a warning (a silent promotion) is run again whole in fix mode, which goes past it."""
    again = _replayed(dry_run, model, kw, "strict")
    if not _left(again) and again.meta.get("raised"):
        again = _replayed(dry_run, model, kw, "fix")
    left = _left(again)
    if left:
        f = left[0]
        where = f" in '{f.location.module}'" if f.location is not None and f.location.module else ""
        return False, f"fails: the dry run with this fix still reports {f.code}{where}"
    return True, PASSES


def _replayed(dry_run: DryRun, model: nn.Module, kw: dict, mode: str) -> Report:
    again = Report(tool="check")
    with _no_nested_verify():
        dry_run(model, kw, again, mode)
    return again


def _left(report: Report) -> list[Finding]:
    """What makes a replay fail: an error, or a dry run that did not complete."""
    return [f for f in report.findings if f.severity == Severity.ERROR or f.code == CHECK_INCOMPLETE]


def input_fixes(
    finding: Finding, kw: dict, flags: dict[str, str] | None, names: dict[Any, str] | None = None
) -> list[Fix]:
    """An input given in another dtype than the model needs: the same --input flag in that dtype,
    or (check called from Python) the user's variable cast before it is passed.

    kw: the inputs, positional ones under their index; names: the user's variable for each (the
    caller's local holding that tensor), where one does."""
    want = getattr(torch, str(finding.data.get("expected_dtype") or ""), None)
    if not isinstance(want, torch.dtype):
        return []
    if not flags:
        return [
            _cast_input(key, var, want)
            for key, var in (names or {}).items()
            if _other_float(kw.get(key), want)
        ]
    out = []
    for key, flag in (flags or {}).items():
        value, text = kw.get(key), flag.removeprefix("--input ")
        if not (flag.startswith("--input ") and _other_float(value, want)) or "=" not in text:
            continue
        shape, dtype = text.split("=", 1)[1].split(":")[0], str(want)[6:]
        out.append(
            _input_fix(
                key,
                want,
                title=f"Pass `{key}` in {dtype}, the model's dtype (in your code: the tensor you pass as {key}=)",
                snippet=f"--input {key}={shape}:{dtype}",
                why=f"the model runs in {dtype}; {key} arrives in {str(value.dtype)[6:]}",
                language="shell",
            )
        )
    return out


def _other_float(value: Any, want: torch.dtype) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != want


def _cast_input(key: Any, var: str, want: torch.dtype) -> Fix:
    dtype = str(want)[6:]
    passed = f"as {key}=" if isinstance(key, str) else f"as input {key}"
    return _input_fix(
        key,
        want,
        title=f"Cast `{var}` to {dtype}, the model's dtype, before you pass it ({passed})",
        snippet=f"{var} = {var}.to(torch.{dtype})",
        why=f"the model runs in {dtype}; `{var}` arrives in another dtype and every layer it reaches mixes the two",
        language="python",
    )


def _input_fix(key: Any, want: torch.dtype, **fields: str) -> Fix:
    """A fix that is the input `key` passed in `want`: replayed as the dry run with that input cast."""
    fix = Fix(**fields)
    fix.dd_input = (key, want)  # type: ignore[attr-defined]
    return fix


def verify_top(
    report: Report,
    mirror: nn.Module,
    factory: Any,
    dry_run: DryRun,
    kw: dict | None = None,
    flags: dict[str, str] | None = None,
    dry_run_s: float = 0.0,
    names: dict[Any, str] | None = None,
) -> None:
    """Write the first error finding's fixes in the user's names, try them, put the passing ones first.

    The mirror is given away: the last replay applies its fix to it, not to a copy (in a forked
    child: a copy of its own). dry_run_s: how
    long the check's own dry run took. The first fix is always replayed; another only while the time
    spent so far plus one more dry run stays within max(BUDGET_S, dry_run_s) (a failing fix fails
    fast, a passing one costs a whole dry run): on a huge model only the first fix is replayed."""
    first = next(
        (f for f in report.findings if f.severity == Severity.ERROR and f.code != CHECK_INCOMPLETE), None
    )
    if first is None:
        return
    if isinstance(factory, nn.Module) and made_by.get() is not None:
        factory = made_by.get()
    name, where, scope = user_name(factory)
    kw = kw or {}
    island = island_fixes(first, mirror, name, factory)
    fixes = [*island, *([] if island else input_fixes(first, kw, flags, names)), *first.fixes]
    # in the factory's names (an input fix is in the caller's own already)
    in_factory = [f.language == "python" and not hasattr(f, "dd_input") for f in fixes]
    fixes = [renamed(f, name) if there else f for f, there in zip(fixes, in_factory, strict=True)]
    fixes = [_with_import(f, scope) if there else f for f, there in zip(fixes, in_factory, strict=True)]
    seen: set[str] = set()
    fixes = [f for f in fixes if not (f.snippet and f.snippet in seen) and not seen.add(f.snippet)]
    runnable = [
        f for f in fixes if (f.language == "python" or hasattr(f, "dd_input")) and has_code(f.snippet)
    ]
    for fix in fixes:
        if not any(fix is f for f in runnable):
            code = fix.language == "python" or hasattr(fix, "dd_input")
            fix.verification = fix.verification or (NO_CODE if code else NOT_PYTHON)
    trial = _Trial(runnable[:TRIED], mirror, name, where, scope, dry_run, kw, dry_run_s)
    if isolation.can_fork():
        outcome = isolation.in_child(trial.labels)
        labels = outcome.value or [
            (None, not_verified(outcome.stopped or "").text, f.title) for f in trial.tried
        ]
    elif all(isolation.library_code(m) for m in mirror.modules()):
        with isolation.sealed([mirror]):
            labels = trial.labels()
    else:
        why = f"the model runs code of yours, replayed only in a separate process: {isolation.why_no_fork()}"
        labels = [(None, not_verified(why).text, f.title) for f in trial.tried]
    for fix, (verified, text, title) in zip(trial.tried, labels, strict=True):
        fix.verified, fix.verification, fix.title = verified, text, title
    for fix in runnable[TRIED:]:
        fix.verification = "not verified (only the first fixes are)"
    named = [f for f in fixes if not f.verification.startswith("not verified (names ")]
    fixes = named or fixes  # a snippet naming what the factory does not have goes, unless it is all
    first.fixes = sorted(fixes, key=lambda x: RANK[x.verified])


class _Trial:
    """The first fixes replayed one after another, within the time budget (verify_top)."""

    def __init__(
        self,
        tried: list[Fix],
        mirror: nn.Module,
        name: str,
        where: str,
        scope: dict[str, Any],
        dry_run: DryRun,
        kw: dict,
        dry_run_s: float,
    ) -> None:
        self.tried, self.mirror, self.name, self.where, self.scope = tried, mirror, name, where, scope
        self.dry_run, self.kw, self.dry_run_s = dry_run, kw, dry_run_s

    def labels(self) -> list[tuple[bool | None, str, str]]:
        """(verified, verification, title) of each fix tried: plain data, sent back from a child."""
        started = time.perf_counter()
        out = []
        for fix in self.tried:
            out.append(self._one(fix, time.perf_counter() - started))
        return out

    def _one(self, fix: Fix, spent: float) -> tuple[bool | None, str, str]:
        if fix is not self.tried[0] and spent + self.dry_run_s > max(BUDGET_S, self.dry_run_s):
            why = unreplayable(fix, self.name, self.scope)
            return (
                None,
                why or "not verified (budget: each replay is a dry run of the whole model)",
                fix.title,
            )
        try:
            last = fix is self.tried[-1]
            verified, text = replay(fix, self.mirror, self.name, self.scope, self.dry_run, self.kw, last)
        except Exception as exc:  # the tool's own trouble: never at the cost of the report
            verified, text = None, f"not verified ({type(exc).__name__} in the replay)"
        pasted_there = not (getattr(fix, "dd_replaces", False) or hasattr(fix, "dd_input"))
        title = fix.title
        if verified and self.where and fix.language == "python" and pasted_there:
            title += f" ({self.where})"
        return verified, text, title
