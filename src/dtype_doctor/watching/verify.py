"""The live back-end of the verifier (verifying/verifier.py): try a fix before offering it first.

The failing call (the outermost module call the user made, with its recorded arguments: the whole
forward, not only the module that failed) is replayed on deep copies of the user's objects with the fix's snippet applied to them, exactly as pasted; the
result is compared with the same call, on the same inputs, in float32 (verifying/contract.py). On
meta (`check`) the replay runs under `watch` and passes when it reports no error. The replays run in
a forked child, or in-process only for library code (verifying/isolation.py).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
import itertools
import re
import threading
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from ..remedies.scope import unbound_at
from ..report import Finding, Fix
from ..tensors import iter_tensors, map_tensors
from ..tracing.casts import MODULE_CASTS
from ..verifying import isolation, verifier
from ..verifying.contract import NOT_PYTHON_WHY, RANK, has_code, not_verified
from ..verifying.verifier import Outcome
from .replay_scope import other_model, pasted_elsewhere

if TYPE_CHECKING:
    from .findings import FixContext

MAX_ELEMENTS = 50_000_000  # models larger than this are not copied for a replay
TRIED = 4  # fixes tried per finding


@dataclass
class Call:
    """A call of a model the user made: `module.method(*args, **kwargs)`."""

    module: nn.Module
    method: str
    args: tuple
    kwargs: dict
    autocast: tuple = ()  # (device, dtype) pairs in force at the call


def floats_in(value: Any) -> list[torch.Tensor]:
    """The first 64 non-empty floating tensors, eight containers deep at most."""
    found = (t for t in iter_tensors(value, max_depth=8) if t.is_floating_point() and t.numel())
    return list(itertools.islice(found, 64))


def size_of(module: nn.Module) -> int:
    sizes = getattr(_replaying, "sizes", None)  # a session's fixes replay the same model: counted once
    if sizes is not None and id(module) in sizes and sizes[id(module)][0] is module:
        return sizes[id(module)][1]
    size = sum(p.numel() for p in module.parameters() if not is_lazy(p))
    if sizes is not None:
        sizes[id(module)] = (module, size)
    return size


def on_meta(module: nn.Module) -> bool:
    return any(p.is_meta for p in module.parameters())


def run_call(call: Call, module: nn.Module, args: tuple, kwargs: dict, contexts: list) -> Any:
    with contextlib.ExitStack() as stack:
        for c in [*(torch.autocast(d, dtype=t) for d, t in call.autocast), *contexts]:
            stack.enter_context(c)
        stack.enter_context(torch.no_grad())
        if on_meta(module):
            with _replaying.session_type(model=module) as s:  # the verifying session's own kind
                out = getattr(module, call.method)(*args, **kwargs)
            errors = [f for f in s.report.errors if f.code != "tool-internal-error"]
            if errors:
                raise RuntimeError(f"the dry run still reports {errors[0].code}: {errors[0].message}")
            return out
        return getattr(module, call.method)(*args, **kwargs)


def reference(call: Call) -> list[torch.Tensor] | None:
    """The call's floating outputs in float32 (None on meta or when fp32 does not run)."""
    if on_meta(call.module) or size_of(call.module) > MAX_ELEMENTS or _not_in_process(call):
        return None
    memo: dict[int, Any] = {}
    module, args, kwargs = copy.deepcopy((call.module, call.args, call.kwargs), memo)
    module.float()
    up = map_tensors((args, kwargs), lambda t: t.float() if t.is_floating_point() else t)
    try:
        plain = Call(call.module, call.method, call.args, call.kwargs)  # fp32: no autocast
        return floats_in(run_call(plain, module, up[0], up[1], []))
    except Exception:
        return None


def _made_anew(tree: ast.Module) -> bool:
    """The snippet assigns a module built by a constructor or loader (new weights: no fp32 twin)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            while isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
                func = func.value.func  # X(...).eval().to(...)
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name[:1].isupper() or name.startswith("from_"):
                return True
    return False


def max_relative_error(got: list[torch.Tensor], ref: list[torch.Tensor]) -> float | None:
    """Max relative error of the first output that float32 makes non-zero (a ControlNet's
    zero-initialised residuals prove nothing); None when there is none. May be nan or inf."""
    pairs = [(g, r) for g, r in zip(got, ref, strict=False) if g.shape == r.shape and bool(r.abs().max() > 0)]
    if not pairs:
        return None
    g, r = pairs[0]
    return float((g.float() - r).abs().max() / r.abs().max())


@dataclass
class Live:
    """The live back-end (verifier.Backend): a fix's snippet applied to copies of the objects it
    names (from `env`), then `call`, the outermost model call the user made, replayed whole and
    compared with `ref`, the same call in float32. `inner` maps the names of the user's frames
    inside the call to where they are (not replayable)."""

    env: dict[str, Any]
    call: Call
    ref: list[torch.Tensor] | None
    root_expr: str | None = None
    call_src: tuple[list[str], dict[str, str]] | None = None
    inner: dict[str, str] = field(default_factory=dict)
    scope: types.FrameType | None = None  # the frame whose names `env` holds
    spans: list[tuple[str, int, int, str]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # a fix's `file` -> the path to read it at

    def edits(self, fix: Fix) -> list[tuple[str, str]]:
        return [("", fix.snippet)]

    def refuse(self, fix: Fix) -> str | None:
        from .names import loaded_names

        if fix.language != "python":
            return NOT_PYTHON_WHY
        try:
            ast.parse(fix.snippet)
        except SyntaxError:
            return "does not parse"
        inside = next((w for f, a, b, w in self.spans if f == fix.file and a <= (fix.line or 0) <= b), None)
        if inside:  # applied to the caller's objects of the same names, it would not be the fix as pasted
            return f"pasted in {inside}, inside the replayed call"
        path = self.files.get(fix.file or "")  # the replay's working directory is not the user's
        unbound = unbound_at(path, fix.line, fix.snippet) if path and fix.line else None
        if unbound:  # replayed on the caller's global of that name, it would pass; pasted, it raises
            return f"pasted in {unbound[1]}, it makes `{unbound[0]}` local there, read before it is assigned"
        names = (loaded_names(fix.snippet) or set()) - {"torch", "nn", "F"}
        missing = sorted(n for n in names if n not in self.env)
        places = sorted({self.inner[n] for n in missing if n in self.inner})
        if missing and places:
            what = ", ".join(f"`{n}`" for n in missing)
            return f"pasted in {places[0]}, where {what} is: inside the replayed call"
        if missing:
            return f"names {', '.join(missing)}, which the replay does not have"
        elsewhere = pasted_elsewhere(fix, self.scope, self.call.module)
        if elsewhere:
            return elsewhere
        if size_of(self.call.module) > MAX_ELEMENTS:
            return "model too large to copy for a replay"
        other = other_model(names | _stored(ast.parse(fix.snippet)), self.env, self.call.module, self._used())
        if other:  # `text_encoder_2.to(...)` when the call is the UNet's: its output was made before
            return f"`{other}` is not a model the replayed call runs: what it made came before the call"
        data = {n for n in _stored(ast.parse(fix.snippet)) if n in self.env}
        data = {n for n in data if not isinstance(self.env[n], nn.Module)}
        passed = {id(t) for t in iter_tensors((self.call.args, self.call.kwargs))}
        if data and not data & self._used() and not any(id(self.env[n]) in passed for n in data):
            return f"`{', '.join(sorted(data))}` is not what the replayed call receives: used before it"
        return _not_in_process(self.call)

    def _used(self) -> set[str]:
        """The names the call's own argument expressions read."""
        from .names import loaded_names

        sources = [*self.call_src[0], *self.call_src[1].values()] if self.call_src else []
        return set().union(*(loaded_names(x) or set() for x in sources)) if sources else set()

    def run(self, fix: Fix) -> Outcome:
        from .names import loaded_names

        call, env, tree = self.call, self.env, ast.parse(fix.snippet)
        names = (loaded_names(fix.snippet) or set()) - {"torch", "nn", "F"}
        objs = {n: env[n] for n in names | _stored(tree) | self._used() if n in env}  # rebound ones too
        memo: dict[int, Any] = {}
        for v in objs.values():  # Python modules, functions, classes: shared; the user's objects copied
            if isinstance(v, _SHARED):
                memo[id(v)] = v
        copies, module, args, kwargs = copy.deepcopy((objs, call.module, call.args, call.kwargs), memo)
        ns: dict[str, Any] = {"torch": torch, "nn": nn, **copies}
        contexts: list[Any] = []
        try:
            for stmt in tree.body:
                if isinstance(stmt, ast.With):  # the fix is a context: replay the call inside it
                    contexts += [
                        eval(compile(ast.Expression(i.context_expr), "<fix>", "eval"), ns) for i in stmt.items
                    ]
                else:
                    exec(compile(ast.Module([stmt], []), "<fix>", "exec"), ns)
        except Exception as exc:
            return Outcome(raised=f"{type(exc).__name__}: {str(exc)[:120]}")
        subst = {id(copies[n]): ns[n] for n in copies if ns.get(n) is not copies[n]}
        module = subst.get(id(module), module)
        if self.call_src is not None:  # an argument passed as a name the fix rebinds: the new value
            args, kwargs = _rebound(_by_name(self.call_src, call, args), args, kwargs, ns, copies)
        if self.root_expr:  # the fix may have put a new module where the user's code reaches the model
            with contextlib.suppress(Exception):
                again = eval(self.root_expr, ns)
                if isinstance(again, nn.Module):
                    module = again
        args, kwargs = map_tensors((args, kwargs), lambda t: subst.get(id(t), t))
        _same_draws()  # the forward draws what the fp32 reference drew, whatever the snippet drew
        try:
            out = run_call(call, module, args, kwargs, contexts)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            return Outcome(failed=f"replayed, {type(exc).__name__}: {first}")
        got = floats_in(out)
        if _made_anew(tree):
            return Outcome(unmeasured="passes (the module is made anew: no comparison with fp32)")
        if got and got[0].is_meta:
            return Outcome(unmeasured="the replayed call passes (dtypes only, on meta)")
        return Outcome(error=max_relative_error(got, self.ref or []))


def _stored(tree: ast.Module) -> set[str]:
    """The names the snippet assigns."""
    return {t.id for node in ast.walk(tree) for t in getattr(node, "targets", ()) if isinstance(t, ast.Name)}


def _by_name(
    call_src: tuple[list[str], dict[str, str]], call: Call, args: tuple
) -> tuple[list[str], dict[str, str]]:
    """The call's source with the positional expressions the recording holds as keywords (a
    method's arguments recorded by name: `vae.decode(latents / s)` is `decode(z=...)`) named."""
    positional, keywords = call_src
    if len(positional) <= len(args):
        return call_src
    try:
        params = list(inspect.signature(getattr(call.module, call.method)).parameters.values())
    except (TypeError, ValueError, AttributeError):
        return call_src
    named = dict(keywords)
    for i, src in enumerate(positional[len(args) :], start=len(args)):
        if i >= len(params) or params[i].kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            return call_src
        named.setdefault(params[i].name, src)
    return positional[: len(args)], named


_SHARED = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


def _rebound(
    call_src: tuple[list[str], dict[str, str]], args: tuple, kwargs: dict, ns: dict, copies: dict
) -> tuple[tuple, dict]:
    """The recorded arguments, except one the user wrote as an expression of names the fix rebinds,
    evaluated again on the fixed copies: plain reads (`x`, `batch.x`, `inputs["ids"]`), arithmetic
    (`latents / vae.config.scaling_factor`) and torch's own deterministic functions and tensor
    methods (`torch.cat([latents, mask], dim=1)`, `x.to(dtype)`), so that the snippet's cast reaches
    the call. Any other call (one of the user's, one that draws random numbers) is never evaluated
    again: `vae(get_batch())` calls get_batch once."""

    def new(src: str, old: Any) -> Any:
        try:
            tree = ast.parse(src, mode="eval")
        except SyntaxError:
            return old
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        if not names & set(copies) or not names <= set(ns) or not all(_replayable(n) for n in ast.walk(tree)):
            return old
        try:
            return eval(compile(tree, "<argument>", "eval"), ns)
        except Exception:
            return old

    if len(call_src[0]) == len(args):
        args = tuple(new(src, a) for src, a in zip(call_src[0], args, strict=True))
    kwargs = {k: new(call_src[1][k], v) if k in call_src[1] else v for k, v in kwargs.items()}
    return args, kwargs


_READS = (
    ast.Expression,
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Constant,
    ast.Load,
    ast.Slice,
    ast.BinOp,  # arithmetic on reads (`latents / scale`, `-x`): deterministic, calls nothing of the user's
    ast.UnaryOp,
    ast.operator,
    ast.unaryop,
    ast.List,
    ast.Tuple,
    ast.keyword,
)
_TORCH_ROOTS = {"torch", "F"}  # torch.cat, torch.nn.functional.pad, F.pad
_TENSOR_METHODS = MODULE_CASTS | {
    "contiguous", "clone", "detach",
    "permute", "reshape", "view", "unsqueeze", "squeeze", "transpose", "flatten", "expand", "repeat",
}  # fmt: skip
_DRAWS = re.compile(r"rand|normal|bernoulli|multinomial|poisson|dropout|uniform|exponential|seed|empty")


def _replayable(node: ast.AST) -> bool:
    """A node of an argument expression that may be evaluated again: a read, arithmetic, or a call
    of torch's (no random draw, no uninitialised memory) or of a tensor's cast/shape methods."""
    if isinstance(node, _READS):
        return True
    if not isinstance(node, ast.Call):
        return False
    parts: list[str] = []
    func = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if any(_DRAWS.search(p) for p in parts) or (isinstance(func, ast.Name) and _DRAWS.search(func.id)):
        return False
    if isinstance(func, ast.Name) and func.id in _TORCH_ROOTS and parts:
        return True
    return isinstance(node.func, ast.Attribute) and node.func.attr in _TENSOR_METHODS


def verify(finding: Finding, call: Call, made: FixContext, ref: list[torch.Tensor] | None) -> None:
    """Label the finding's fixes through the verifier (the first TRIED with code are replayed) and
    put the ones that pass first (`made`: the context its fixes were made in, watching.findings.FixContext)."""
    scope = made.scope
    env = {**scope.f_globals, **scope.f_locals} if scope is not None else {}
    spans, files = getattr(made, "spans", []), getattr(made, "files", {})  # a context made elsewhere: none
    live = Live(env, call, ref, made.root_expr, made.call_src, made.inner or {}, scope, spans, files)
    tried = 0
    for fix in finding.fixes:
        runs = fix.language == "python" and has_code(fix.snippet)
        if runs and tried >= TRIED:
            fix.verified, fix.verification = None, not_verified(_beyond(fix, env, live.inner)).text
            continue
        v = verifier.verify(fix, live)
        fix.verified, fix.verification = v.passes, v.text
        tried += runs
    finding.fixes = sorted(finding.fixes, key=lambda x: RANK[x.verified])


def _beyond(fix: Fix, env: dict[str, Any], inner: dict[str, str]) -> str:
    """Why a fix past the first TRIED is not replayed."""
    from .names import loaded_names

    places = sorted({inner[n] for n in (loaded_names(fix.snippet) or ()) if n in inner and n not in env})
    return f"pasted in {places[0]}, inside the replayed call" if places else "only the first fixes are"


def _not_in_process(call: Call) -> str | None:
    """Why the call cannot be replayed here (the in-process fallback runs library code only)."""
    if not getattr(_replaying, "in_process", False) or on_meta(call.module):
        return None
    if all(isolation.library_code(m) for m in call.module.modules()):
        return None
    return f"the call runs code of yours, replayed only in a separate process: {isolation.why_no_fork()}"


_replaying = threading.local()  # a replay's own watch (on meta) verifies nothing again


def _same_draws() -> None:
    """The fp32 reference and every replay draw the same random numbers (dropout, noise drawn in
    forward from torch, `random` or NumPy: same inputs). The user's generators are not these: the
    replays run apart (verifying/isolation.py)."""
    start = getattr(_replaying, "rng", None)
    if start is not None:
        isolation.restore_generators(start)
