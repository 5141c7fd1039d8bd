"""check: every dtype mismatch a real run would hit, found with no compute and no GPU.

The model is mirrored on the `meta` device (structure, dtypes and names, no data) and run there under
the contracts of `watch(mode="fix")`: meta kernels skip the dtype checks of linear/mm/addmm/norms/
index_put, the contracts do not, and fix mode casts the odd operand so one pass lists every mismatch.
Integer and bool values (ids, masks, positions) stay real and are computed for real (check_hybrid.py),
so code that reads them runs. The user's model is never modified.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import FrameType
from typing import Any

import torch
from torch import nn

from .. import catalog
from ..catalog.family_codes import CHECK_INCOMPLETE
from ..dtypes import dtype_name, to_torch_dtype
from ..errors import DoctorError, DtypeMismatchError
from ..inputs import meta_inputs
from ..loading import call_factory
from ..processors import fold_repeated_blocks
from ..repair.policy import KeepPattern, select
from ..report import Evidence, Finding, Location, Report, Severity
from ..tensors import iter_tensors, map_tensors
from ..tracing.files import tool_file, torch_file
from ..watching import autocast_table
from ..watching.names import tensor_name, user_frames
from ..watching.provenance import short_path
from .audit import autocast_findings, autocast_of
from .convert import convert_like_loader
from .dry_run_modes import hybrid
from .tree_copy import deepcopy_tree

__all__ = ["build", "build_on_meta", "check", "check_keep_fp32", "meta_inputs", "mirror_on_meta"]


def check(
    model_or_factory: nn.Module | Callable[[], nn.Module],
    *example_inputs: Any,
    dtype: torch.dtype | str | None = torch.float16,
    keep_fp32: Iterable[KeepPattern] = (),
    autocast: torch.dtype | str | torch.autocast | None = None,
    input_flags: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> Report:
    """Dry-run `model(*example_inputs, **kwargs)` on meta and report every dtype mismatch.

    model_or_factory: a module (on any device: it is mirrored on meta, never modified) or a
    zero-argument factory (called under `torch.device("meta")`). dtype: the precision to check the
    model in, converted on the mirror as the model's loader would (check_convert.py: transformers'
    `from_pretrained(dtype=)`, diffusers' `from_pretrained(torch_dtype=)`, else `.to(dtype)`; `keep_fp32`
    modules stay float32 on top); None keeps the dtypes as they are.
    Inputs: real or meta tensors, specs like `("2x4x64x64", "float32")` or "2x4x64x64:float32",
    nested in lists/dicts, or any other value (passed as is). autocast: the dtype of an autocast the
    model will run under (its per-op casts are emulated with CUDA's policy), or the autocast itself,
    `torch.autocast("cpu", dtype=torch.bfloat16)`, for its device's policy.
    """
    device_type = "cuda"  # users check before renting a GPU
    if isinstance(autocast, torch.autocast):
        device_type, autocast = autocast.device, autocast.fast_dtype
    if dtype is not None and not to_torch_dtype(dtype).is_floating_point:
        raise DoctorError(f"dtype must be a floating dtype, got {dtype_name(to_torch_dtype(dtype))}")
    if autocast is not None and to_torch_dtype(autocast) not in (torch.float16, torch.bfloat16):
        raise DoctorError(f"autocast must be float16 or bfloat16, got {autocast}")
    # the user's variables for the inputs (before they are mirrored): an input fix is written in them
    names = _input_names(example_inputs, kwargs) if input_flags is None else {}
    args, kw = meta_inputs(example_inputs), meta_inputs(kwargs)  # a bad spec fails before the build
    model = build_on_meta(model_or_factory)
    keep_fp32 = tuple(keep_fp32)
    check_keep_fp32(model, keep_fp32)
    mirror = mirror_on_meta(model)
    kept, loaded_as = (
        convert_like_loader(mirror, to_torch_dtype(dtype), keep_fp32) if dtype is not None else ([], None)
    )
    # an autocast given, or the one accelerate's prepare() wrapped around forward
    autocast = dtype_name(to_torch_dtype(autocast)) if autocast is not None else autocast_of(model)
    report = Report(tool="check")
    report.meta.update(
        {
            "model": type(model).__name__,
            "dtype": dtype_name(to_torch_dtype(dtype)) if dtype is not None else None,
            "kept_fp32": kept,
            "loaded_as": loaded_as,
            "autocast": autocast,
            "autocast_device": device_type if autocast is not None else None,
            "inputs": _describe_inputs(args, kw),
        }
    )
    if loaded_as is not None:
        report.meta["notes"] = [f"loaded as: {loaded_as}"]
    from .audit import dtype_map

    report.sections.append(dtype_map(mirror))  # the checked dtypes, folded; the HTML draws the tree
    if autocast is not None:
        report.extend(autocast_findings(mirror, "", autocast))
    started = time.perf_counter()
    memo: dict = {}  # the meta kernels' answers, reused by the fix replays' dry runs
    _dry_run(mirror, args, kw, report, autocast, device_type, memo=memo)
    dry_run_s = time.perf_counter() - started
    if input_flags is not None:
        name_cli_inputs(report, input_flags, _outer_files())
    report.findings = fold_repeated_blocks(report).findings  # one finding per repeated block
    from .fix_replay import verify_top

    verify_top(
        report,
        mirror,
        model_or_factory,
        lambda m, k, r, mode: _dry_run(m, *_split_inputs(k), r, autocast, device_type, mode, memo),
        {**dict(enumerate(args)), **kw},  # positional inputs under their index
        dict(input_flags or {}),
        dry_run_s,
        names,
    )
    from ..watching import fp32_error

    if fp32_error.wanted():  # check --diff's re-run: say why its error vs fp32 is not measured
        report.meta["error_vs_fp32"] = "not measured (a dry run on meta has no values)"
    first = next((f for f in report.findings if f.severity == Severity.ERROR), None)
    if first is not None and first.location is not None:
        report.meta["first_error"] = {
            "code": first.code,
            "module": first.location.module,
            "op": first.location.op,
        }
    return report


def _input_names(args: tuple, kwargs: dict) -> dict[Any, str]:
    """The caller's variable holding each tensor input (keyword, or positional by index)."""
    frames = user_frames(3)  # the frames above check()
    given = {**dict(enumerate(args)), **kwargs}
    found = {
        key: tensor_name(value, frames) for key, value in given.items() if isinstance(value, torch.Tensor)
    }
    return {key: name for key, name in found.items() if name is not None}


def _split_inputs(inputs: dict) -> tuple[tuple, dict]:
    """(positional, keyword) inputs from one dict whose integer keys are positions."""
    positions = sorted(key for key in inputs if isinstance(key, int))
    return tuple(inputs[i] for i in positions), {k: v for k, v in inputs.items() if not isinstance(k, int)}


# ---------------------------------------------------------------- the model on meta


def check_keep_fp32(model: nn.Module, patterns: Iterable[KeepPattern]) -> None:
    """Each keep_fp32 pattern must match a module: a typo would silently keep nothing in float32."""
    select(model, patterns)


def build(factory_or_object: Any) -> Any:
    """Call a factory under `torch.device("meta")` (no memory); an object is returned as is.

    A factory that cannot build on meta (it reads tensor values at init) is built normally.
    """
    if isinstance(factory_or_object, nn.Module) or not callable(factory_or_object):
        return factory_or_object
    try:
        with torch.device("meta"):
            return factory_or_object()
    except Exception:
        return call_factory(factory_or_object)


def build_on_meta(model_or_factory: nn.Module | Callable[[], Any]) -> nn.Module:
    """A module as given, or a factory's module built on meta (see `build`)."""
    model = build(model_or_factory)
    if not isinstance(model, nn.Module):
        if callable(model_or_factory):
            raise DoctorError(f"the factory returned {type(model).__name__}, not a torch.nn.Module")
        raise DoctorError(f"check needs a torch.nn.Module (or a factory of one), got {type(model).__name__}")
    return model


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    if not (t.is_meta or t.is_floating_point() or t.is_complex() or isinstance(t, nn.Parameter)):
        return t.detach().to("cpu", copy=True)  # ids, positions, masks: small, and the model may read them
    if (
        t.is_contiguous()
    ):  # what empty_like makes of it (dense: the same strides), without its Python meta kernel
        meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    else:
        meta = torch.empty_like(t, device="meta")
    if isinstance(t, nn.Parameter):
        return nn.Parameter(meta, requires_grad=t.requires_grad)
    return meta


# what torch imports on its first meta op (torch._check's symbolic shapes; the decompositions'
# dynamo-disable wrapper, which imports torch._dynamo and, in a CUDA build, triton)
_FIRST_OP_IMPORTS = ("torch.fx.experimental.symbolic_shapes", "torch._dynamo")


def _import_first_op_modules() -> None:
    """Made here, at the top of the stack: at a deep model's innermost module the import chain can
    meet Python 3.12's fixed C recursion limit half-way, leaving a module half-initialised for good."""
    for name in _FIRST_OP_IMPORTS:
        with contextlib.suppress(Exception):  # what fails to import fails as before, where torch asks
            importlib.import_module(name)


@contextlib.contextmanager
def _room_for(model: nn.Module) -> Iterator[None]:
    """deepcopy (and the watched forward) recurse ~10 frames per module level: a model nested a few
    hundred deep that runs fine must not fail to copy or run, so the limit grows with its depth meanwhile."""
    _import_first_op_modules()
    depth, todo, seen = 0, [(model, 1)], set()
    while todo:
        module, level = todo.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        depth = max(depth, level)
        todo.extend((child, level + 1) for child in module._modules.values() if child is not None)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, old + 12 * depth))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def mirror_on_meta(model: nn.Module) -> nn.Module:
    """A deep copy of the module tree whose tensors are meta tensors of the same shapes and dtypes.

    The data is never copied: every parameter, buffer and tensor attribute is pre-seeded in
    deepcopy's memo with its meta twin, so only the Python structure is duplicated.
    """
    memo: dict[int, Any] = {}
    for module in model.modules():
        for value in (*module._parameters.values(), *module._buffers.values(), *vars(module).values()):
            if isinstance(value, torch.Tensor) and id(value) not in memo:
                memo[id(value)] = _meta_like(value)
    try:
        with _room_for(model):
            mirror = deepcopy_tree(model, memo)
    except Exception as exc:  # something in the module tree cannot be copied (a lock, an open file...)
        raise DoctorError(
            f"cannot mirror {type(model).__name__} on meta ({type(exc).__name__}: {exc}); "
            "pass a factory that builds it instead"
        ) from None
    _drop_offload_hooks(mirror)
    return mirror


def _drop_offload_hooks(mirror: nn.Module) -> None:
    """accelerate's device-map/offload hooks would move real weights into the mirror: unhook it.

    Not accelerate's remove_hook_from_module: detaching an offload hook writes weights back."""
    for module in mirror.modules():
        if "_hf_hook" not in vars(module):
            continue
        old = vars(module).get("_old_forward")
        del module._hf_hook
        if old is not None:
            module.forward = old
            del module._old_forward
        else:
            vars(module).pop("forward", None)


def _describe_inputs(args: tuple, kwargs: dict) -> dict[str, str]:
    out = {}
    for key, value in [*((f"arg{i}", a) for i, a in enumerate(args)), *kwargs.items()]:
        if isinstance(value, torch.Tensor):
            out[key] = f"{'x'.join(map(str, value.shape)) or 'scalar'}:{dtype_name(value.dtype)}"
    return out


# ---------------------------------------------------------------- the dry run


def _dry_run(
    model: nn.Module,
    args: tuple,
    kwargs: dict,
    report: Report,
    autocast: Any,
    device_type: str = "cuda",
    mode: str = "fix",
    memo: dict | None = None,
) -> None:
    """mode "fix" lists every mismatch; "strict" (a fix's replay) stops at the first one, reported.
    memo: the hybrid's meta answers to share with other dry runs of this check."""
    from ..watching import watch

    session = watch(model=model, mode=mode, report=report)
    session.blocks.enabled = True  # a mismatch in every layer: built once, counted 32 times
    session.repeats.assume_clean = mode == "strict"  # a replay asks only what is left: no origins
    # entered after watch, so it sees each call first: the contracts get the autocast dtypes
    emulate = (
        AutocastEmulation(to_torch_dtype(autocast), device_type)
        if autocast is not None
        else contextlib.nullcontext()
    )
    log = None
    fronted = hybrid(memo, session)  # before the session is entered: it takes the hybrid's fronts
    try:
        with torch.no_grad(), _room_for(model), session, emulate, fronted as log:
            model(*args, **kwargs)
    except Exception as exc:  # the dry run stopped: say where, keep what was found
        if not (mode == "strict" and isinstance(exc, DtypeMismatchError)):
            report.add(_incomplete(exc, model))
    if log is not None and log.items:
        report.meta["assumptions"] = [vars(a) for a in log.items.values()]
        notes = report.meta.setdefault("notes", [])
        for a in log.items.values():
            where = f" at {short_path(a.file)}:{a.line}" if a.file else ""
            times = f" (x{a.count})" if a.count > 1 else ""
            notes.append(f"assumed: {a.op}{where}: {a.what}{times}")


def _incomplete(exc: BaseException, model: nn.Module) -> Finding:
    frame = _user_frame(exc.__traceback__)
    module = module_in_traceback(exc.__traceback__, model)
    where = Location(module=module, file=frame[0], line=frame[1], function=frame[2]) if frame else None
    return catalog.finding(
        CHECK_INCOMPLETE,
        message=f"the dry run stopped at {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
        location=where if frame else Location(module=module),
        evidence=[Evidence(text=str(exc)[:500], source="meta dry run")],
    )


def module_in_traceback(tb: Any, model: nn.Module) -> str | None:
    """The innermost module of `model` in the traceback: the deepest frame whose `self` is one of them."""
    names = {id(m): n for n, m in model.named_modules()}
    found = None
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if id(owner) in names:
            found = names[id(owner)]
        tb = tb.tb_next
    return found


def _user_frame(tb) -> tuple[str, int, str] | None:
    """The deepest traceback frame outside torch and dtype_doctor."""
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not torch_file(code.co_filename) and not tool_file(code.co_filename):
            found = (code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    return found


class AutocastEmulation(torch.overrides.TorchFunctionMode):
    """Autocast's per-op casts, applied to meta tensors (autocast has no meta dispatch key).

    The policy is `autocast_table`'s for `device_type` (CUDA by default: users check before renting
    a GPU); the cast happens before the op reaches the watch contracts, as it does on a GPU.
    """

    def __init__(self, dtype: torch.dtype, device_type: str = "cuda") -> None:
        super().__init__()
        self.dtype = dtype
        self.device_type = device_type

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = autocast_table.policy(self.device_type, func, self.dtype)
        if kind is None:
            return func(*args, **kwargs)
        floats = [t.dtype for t in iter_tensors((args, kwargs)) if t.is_floating_point()]
        if len(set(floats)) > 1 and not autocast_table.casts_mixed(
            self.device_type, autocast_table.aten_op_name(func), self.dtype
        ):
            return func(*args, **kwargs)  # mixed operands still raise under it (tensordot)
        if kind == autocast_table.PROMOTE:
            target = functools.reduce(torch.promote_types, floats) if floats else None
        else:
            target = self.dtype if kind == autocast_table.LOW else torch.float32
        if target is not None:

            def cast(t: torch.Tensor) -> torch.Tensor:
                return t.to(target) if t.is_floating_point() and t.dtype != torch.float64 else t

            args, kwargs = map_tensors(args, cast), map_tensors(kwargs, cast)
        return func(*args, **kwargs)


# ---------------------------------------------------------------- origins on the command line


def _outer_files() -> set[str]:
    """Files of the frames that called check (for the CLI: the launcher, cli.py, the command)."""
    out: set[str] = set()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        out.add(short_path(frame.f_code.co_filename))
        frame = frame.f_back
    return out


def name_cli_inputs(report: Report, flags: Mapping[str, str], outer: set[str]) -> None:
    """Inputs made from `--input` flags were born in the launcher: name the flag instead, and drop
    op locations that only reach the launcher (a model of torch modules has no line of its own)."""

    def fix(origin: Any) -> None:
        if origin is None:
            return
        if origin.file in outer:
            if origin.kind == "input":
                origin.file, origin.line = flags.get(origin.name or "", "--input"), None
            else:
                origin.file, origin.line = None, None
        for parent in origin.chain:
            fix(parent)
        origin.chain = [o for o in origin.chain if not (o.kind == "call" and o.file is None)]

    for finding in report.findings:
        loc = finding.location
        if loc is not None and loc.file in outer:
            loc.file, loc.line, loc.function = None, None, None
        for operand in finding.operands:
            fix(operand.origin)
