"""Which side of a mismatch is the odd one out, decided from evidence rather than operand order.

An fp32 island in an fp16 model (LoRA A/B added after `.half()`, a ControlNet left fp32 beside an
fp16 UNet, an IP-Adapter branch, a projector or head built after conversion) makes the op see an
fp16 activation and fp32 weights. The op's rule calls the activation odd; the evidence says the
module is: the models the user holds are mostly fp16 and the activation already has that dtype.
Then the cause is the module (every island of one dtype in one model is ONE cause) and the fix
converts it, addressed from the user's own variable.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import linecache
from collections import Counter
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from .. import remedies
from ..catalog.shared_remedies import CAST_PASSED, CONVERT_ISLAND, MAKE_IN_DTYPE
from ..remedies.builders import MANY
from ..remedies.places import Places
from ..report import Fix
from . import call_memo
from .contracts.core import LOW_DTYPES
from .names import expression_for, module_modules, passed_inputs
from .provenance import short_path


@dataclass
class Island:
    """Modules of `model` whose parameters are all `dtype` where the rest of the models are `want`."""

    model: str  # the user's expression for the model that holds them (`unet`, `pipe.controlnet`)
    paths: list[str]  # module paths in that model; "" is the model itself
    dtype: torch.dtype
    want: torch.dtype
    built: tuple[str, int, str] | None = None  # (file, line, source) of the line that made it
    upstream: bool = False  # a model whose output fed the op, not the op's own module

    @property
    def label(self) -> str:
        want, have = str(self.want)[6:], str(self.dtype)[6:]
        if self.paths == [""]:
            text = f"{have} model `{self.model}` beside {want} models"
        else:
            text = f"{have} modules in the {want} model `{self.model}`: {summary(self.paths)}"
        if self.built:
            text += f" (made at {self.built[0]}:{self.built[1]})"
        return text

    def fix(self, places: Places | None = None) -> Fix | None:
        """The island converted like the rest of the model, pasted where the model is (`places`)."""
        what = f"`{self.model}`" if self.paths == [""] else summary(self.paths)
        want, have = str(self.want)[6:], str(self.dtype)[6:]
        return remedies.make(
            CONVERT_ISLAND, places=places, model=self.model, paths=self.paths, want=want, have=have, what=what
        )

    def build_fix(self) -> Fix | None:
        """The line that made the module, made in the right dtype."""
        if self.built is None:
            return None
        file, line, source = self.built
        new = with_dtype(source, f"torch.{str(self.want)[6:]}")
        return remedies.make(MAKE_IN_DTYPE, file=file, line=line, made=new, want=str(self.want)[6:])


def summary(paths: list[str]) -> str:
    leaves = Counter(p.rsplit(".", 1)[-1] for p in paths)
    if len(paths) <= MANY:
        return ", ".join(f"`{p}`" for p in paths)
    return ", ".join(f"{n} × `{leaf}`" for leaf, n in leaves.items())


def _float_params(module: nn.Module) -> list[torch.Tensor]:
    """Floating parameters, lazy ones (not materialised yet) left out."""
    return [p for p in module.parameters() if not is_lazy(p) and p.is_floating_point()]


def majority(modules: list[nn.Module], skip: set[int] | None = None) -> torch.dtype | None:
    """The dtype most parameter elements have across the models (each parameter counted once,
    none of those whose id is in `skip`)."""
    seen: set[int] = set(skip or ())
    count: Counter[torch.dtype] = Counter()
    for m in modules:
        for p in _float_params(m):
            if id(p) not in seen:
                seen.add(id(p))
                count[p.dtype] += p.numel()
    return count.most_common(1)[0][0] if count else None


def root_majority(root: nn.Module) -> torch.dtype | None:
    """majority([root]), once per root call (call_memo)."""
    return call_memo.remembered(root, "majority", lambda: majority([root]))


def islands(model: nn.Module, dtype: torch.dtype) -> list[str]:
    """Maximal submodules of `model` whose parameters are all `dtype` (the model itself: [""])."""
    out: list[str] = []

    def visit(prefix: str, m: nn.Module) -> None:
        ps = _float_params(m)
        if ps and all(p.dtype == dtype for p in ps):
            out.append(prefix)
            return
        for name, child in m.named_children():
            visit(f"{prefix}.{name}" if prefix else name, child)

    visit("", model)
    return out


def decide(
    module: nn.Module | None,
    root: nn.Module | None,
    activation: torch.dtype | None,
    frames: list[FrameType],
) -> Island | None:
    """An Island when the module's parameters, not the activation, are the odd ones out."""
    if module is None or root is None or activation is None:
        return None
    own = {p.dtype for p in module.parameters(recurse=False) if not is_lazy(p) and p.is_floating_point()}
    if len(own) != 1:
        return None
    have = own.pop()
    if have == activation or not ({have, activation} & set(LOW_DTYPES)):
        return None
    inside = root_majority(root)
    if inside == activation:
        want = activation  # an island inside a model of the activation's dtype (LoRA, a head)
    elif inside == have and have == torch.float32 and activation in LOW_DTYPES:
        # a whole model left in the library default beside models the user converted (ControlNet)
        want = majority(
            [m for f in frames for m in module_modules(f)], skip={id(p) for p in root.parameters()}
        )
        if want != activation:
            return None
    else:
        return None
    found = expression_for(root, frames)
    if found is None:
        return None
    name, _frame = found
    paths = islands(root, have)
    if not paths:
        return None
    island = Island(model=name, paths=paths, dtype=have, want=want)
    island.built = made_at(root, paths, frames)
    return island


def upstream(
    tensor: torch.Tensor, prov: Any, frames: list[FrameType], want: torch.dtype | None
) -> Island | None:
    """An Island upstream of the op: the odd tensor took its dtype from the output of a whole model
    the user called (a second text encoder built with no dtype beside fp16 models), so the cause is
    that model's dtype, born where it was built, not the tensor it handed on."""
    have = tensor.dtype
    if want is None or have == want or not ({have, want} & set(LOW_DTYPES)):
        return None
    tag, seen = prov.lookup(tensor), 0
    todo = [tag] if tag is not None else []
    while todo and seen < 64:
        tag, seen = todo.pop(0), seen + 1
        model = tag.module if tag.kind == "output" else None
        if isinstance(model, nn.Module) and tag.dtype == have:
            own = _float_params(model)
            if own and all(p.dtype == have for p in own):
                held = [m for f in frames for m in module_modules(f)]
                if majority(held, skip={id(p) for p in own}) == want and _sibling_in(model, held, want):
                    return _built_island(model, frames, have, want)
        todo.extend(p for p in tag.parents if p.dtype == have)
    return None


def _kind(model: nn.Module) -> tuple[object, ...]:
    config = getattr(model, "config", None)
    return (
        (type(config),) if config is not None and not isinstance(config, dict) else (type(model).__module__,)
    )


def _sibling_in(model: nn.Module, held: list[nn.Module], want: torch.dtype) -> bool:
    """A model of the same kind (one config class, else one source module) held in `want`: this one
    was left in the default by oversight (the second text encoder of a pair). A model of another kind
    (a vision tower feeding a language model) may be kept wide on purpose: not blamed."""
    inside = {id(m) for m in model.modules()}
    return any(
        id(other) not in inside
        and model not in list(other.modules())
        and _kind(other) == _kind(model)
        and majority([other]) == want
        for other in held
    )


def _built_island(
    model: nn.Module, frames: list[FrameType], have: torch.dtype, want: torch.dtype
) -> Island | None:
    """The model as an Island, named where a line of the user's built it (`text_encoder_2 = ...`,
    not the loop variable `te` of a function that only uses it), else by the first name reaching it."""
    first, rest = None, list(frames)
    while rest:
        found = expression_for(model, rest)
        if found is None:
            break
        island = Island(model=found[0], paths=[""], dtype=have, want=want, upstream=True)
        island.built = made_at(model, [""], [found[1]])
        if island.built is not None:
            return island
        first = first or island
        rest = rest[rest.index(found[1]) + 1 :]
    return first


def made_at(root: nn.Module, paths: list[str], frames: list[FrameType]) -> tuple[str, int, str] | None:
    """The user's line that built or loaded the island: an assignment to its variable or attribute."""
    if paths == [""]:
        found = expression_for(root, frames)
        if found is None:
            return None
        target, frame = found[0].rsplit(".", 1)[-1], found[1]
        files = [frame.f_code.co_filename]
    else:
        first = paths[0]
        parent_path, _, target = first.rpartition(".")
        parent = root.get_submodule(parent_path) if parent_path else root
        files = [f.f_code.co_filename for f in frames]
        with contextlib.suppress(TypeError):
            files.insert(0, inspect.getsourcefile(type(parent)) or "")
    for file in dict.fromkeys(files):
        hit = _assignment(file, target)
        if hit is not None:
            return short_path(file), hit[0], hit[1]
    return None


def _assignment(file: str, target: str) -> tuple[int, str] | None:
    lines = linecache.getlines(file)
    if not lines:
        return None
    try:
        tree = ast.parse("".join(lines))
    except SyntaxError:
        return None
    best = None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and node.lineno == node.end_lineno
        ):
            for t in node.targets:
                name = t.attr if isinstance(t, ast.Attribute) else t.id if isinstance(t, ast.Name) else None
                if name == target and (best is None or node.lineno > best[0]):
                    best = (node.lineno, lines[node.lineno - 1].strip())
    return best


def with_dtype(source: str, dt: str) -> str | None:
    """The assignment with the module made in `dt`: `dtype=`/`torch_dtype=` where the call takes it."""
    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
        return None
    call = node.value
    func = ast.unparse(call.func)
    if any(k.arg in ("dtype", "torch_dtype") for k in call.keywords):
        return None
    if func.endswith("from_pretrained"):
        call.keywords.append(ast.keyword("torch_dtype", ast.parse(dt).body[0].value))  # type: ignore[attr-defined]
    elif func.split(".")[-1] in TORCH_LAYERS:
        call.keywords.append(ast.keyword("dtype", ast.parse(dt).body[0].value))  # type: ignore[attr-defined]
    else:
        node.value = ast.parse(f"({ast.unparse(call)}).to({dt})").body[0].value  # type: ignore[attr-defined]
    return ast.unparse(node)


def _takes_dtype(cls: object) -> bool:
    try:
        return isinstance(cls, type) and "dtype" in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


TORCH_LAYERS = frozenset(n for n in dir(nn) if _takes_dtype(getattr(nn, n)))


def input_fix(frame: FrameType, root: nn.Module, model: str, want: torch.dtype) -> Fix | None:
    """Cast what the user passes to the model, on their call line, to the model's dtype."""
    names = passed_inputs(frame, root, want)
    if not names:
        return None
    file, line = short_path(frame.f_code.co_filename), frame.f_lineno
    return remedies.make(CAST_PASSED, file=file, line=line, passed=names, model=model, want=str(want)[6:])
