"""What `fix` must keep together (tied weights) or leave alone (quantized modules).

A parameter shared by two modules has one dtype: keeping one end in fp32 keeps the other end in
fp32 too, so the other end must become an fp32 island with its own border casts, or the forward
fails ("mat1 and mat2 must have the same dtype"). A quantized module (quantize_dynamic) computes
on float32 inputs only and has no floating parameters to cast: it stays as it is, fed float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

_QUANTIZED_PACKAGES = ("torch.ao.nn.quantized", "torch.nn.quantized", "torch.ao.nn.intrinsic.quantized")


@dataclass
class KeepNotes:
    """Modules added to the fp32 set, and why: ties as (kept parameter, tied module, its name
    for the same parameter), e.g. ("head.weight", "embed", "embed.weight")."""

    ties: list[tuple[str, str, str]] = field(default_factory=list)
    quantized: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [
            f"'{kept}' is tied to '{other_param}': '{other}' is kept in fp32 too, with its own border casts"
            for kept, other, other_param in self.ties
        ]
        out += [f"'{name}' is quantized: left as it is and fed float32" for name in self.quantized]
        return out


def is_quantized(module: nn.Module) -> bool:
    return type(module).__module__.startswith(_QUANTIZED_PACKAGES)


def quantized_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The outermost quantized modules (their packed-parameter children are covered by them)."""
    found: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if is_quantized(module) and not any(name.startswith(f"{outer}.") for outer, _ in found):
            found.append((name, module))
    return found


def _owners(model: nn.Module) -> dict[int, list[tuple[str, str]]]:
    """id(parameter) → every (module path, parameter name) that holds it directly."""
    owners: dict[int, list[tuple[str, str]]] = {}
    for path, module in model.named_modules(remove_duplicate=False):
        for pname, p in module._parameters.items():
            if p is not None:
                entry = (path, pname)
                if entry not in owners.setdefault(id(p), []):
                    owners[id(p)].append(entry)
    return owners


def widen_kept(
    model: nn.Module, kept: list[tuple[str, nn.Module]], notes: KeepNotes | None = None
) -> list[tuple[str, nn.Module]]:
    """`kept` plus the modules tied to it and the quantized modules; `notes` get why."""
    notes = notes if notes is not None else KeepNotes()
    modules = dict(model.named_modules())
    kept = list(kept)
    names = {name for name, _ in kept}

    def covered(path: str) -> bool:
        return any(path == k or path.startswith(f"{k}.") or not k for k in names)

    owners = _owners(model)
    queue = list(kept)
    while queue:  # a partner may itself share another parameter: follow the chain
        name, module = queue.pop()
        for sub_path, sub in module.named_modules(prefix=name):
            for pname, p in sub._parameters.items():
                if p is None:
                    continue
                for other, other_param in owners.get(id(p), []):
                    if covered(other) or other not in modules:
                        continue
                    prefix = f"{sub_path}." if sub_path else ""
                    notes.ties.append((f"{prefix}{pname}", other, f"{other}.{other_param}".lstrip(".")))
                    names.add(other)
                    kept.append((other, modules[other]))
                    queue.append((other, modules[other]))
    for name, module in quantized_modules(model):
        if not covered(name):
            notes.quantized.append(name)
            names.add(name)
            kept.append((name, module))
    return kept
