"""The libraries dtype-doctor knows by name: one list, read by explain's tracebacks and context
signals, watch's findings and the env command. Data only; no torch (explain reads it).

A library's `roles` say what each reader uses it for:
  models      its modules are model code the user did not write: watch tags a finding with its name
              (the catalog ranks fixes by it, e.g. `diffusers` → `pipe.to(dtype)`)
  plumbing    its own `self.x(...)` calls in a traceback are wrappers, not the user's modules
  precision   it changes precision on its own: `env` lists it with `note` and checks its build
  uses-apex   it imports apex when apex is installed (`env` names it beside an apex clash)
  version     `env` shows its version among the facts
  oneflow     the OneFlow stack: `env` says not to wrap its compiled modules in torch.autocast
  apex        NVIDIA apex: `env` reads its build (its own checks in env/packages.py)
`EXPLAIN_ENVIRONMENT` names the ones `explain` looks up on this machine.
`words` are how a log or traceback names it (catalog/context.py's signals).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Library:
    module: str  # the top-level import name
    roles: frozenset[str]
    dists: tuple[str, ...] = ()  # its distribution names on PyPI (the first is the usual one)
    note: str = ""  # what it does to precision (role `precision`)
    words: tuple[str, ...] = ()  # how a log names it (catalog/context.py)


_ = frozenset

# in the order `env` shows them (each role's libraries keep their order in this list)
LIBRARIES: tuple[Library, ...] = (
    Library("apex", _({"apex"}), ("apex",)),
    Library("numpy", _({"version"})),
    Library("transformers", _({"models", "uses-apex", "version"})),
    Library("xfuser", _({"uses-apex"})),
    Library("diffusers", _({"models", "uses-apex", "version"})),
    Library("megatron", _({"uses-apex"})),
    Library("xformers", _({"precision"}), ("xformers",), "memory-efficient attention; built against one torch release",
            ("xformers",)),
    Library("flash_attn", _({"precision"}), ("flash-attn", "flash_attn"), "needs sm80+ and fp16/bf16 inputs",
            ("flash_attn", "flash_attention", "FlashAttention")),
    Library("bitsandbytes", _({"precision"}), ("bitsandbytes",), "4/8-bit layers: compute dtype defaults to float32"),
    Library("deepspeed", _({"plumbing", "precision", "uses-apex"}), ("deepspeed",),
            "fp16/bf16 is set in the DeepSpeed config JSON", ("deepspeed", "DeepSpeed")),
    Library("fairseq", _({"uses-apex"})),
    Library("fairscale", _({"uses-apex"})),
    Library("colossalai", _({"uses-apex"})),
    Library("nemo", _({"uses-apex"})),
    Library("timm", _({"models", "uses-apex"})),
    Library("open_clip", _({"uses-apex"})),
    Library("mmcv", _({"uses-apex"})),
    Library("detectron2", _({"uses-apex"})),
    Library("transformer_engine", _({"precision"}), ("transformer-engine", "transformer_engine"),
            "fp8 autocast (te.fp8_autocast)"),
    Library("intel_extension_for_pytorch", _({"precision"}), ("intel-extension-for-pytorch",),
            "ipex.optimize(dtype=) casts"),
    Library("accelerate", _({"models", "plumbing", "precision", "version"}), ("accelerate",),
            "mixed_precision wraps forward in autocast"),
    Library("peft", _({"models"})),
    Library("torch", _({"plumbing"})),
    Library("oneflow", _({"plumbing", "oneflow"}), ("oneflow",), words=("oneflow", "onediff")),
    Library("onediff", _({"oneflow"}), ("onediff",)),
    Library("onediffx", _({"oneflow"})),
)  # fmt: skip

_BY_MODULE = {lib.module: lib for lib in LIBRARIES}


def library(module: str) -> Library:
    """The entry for a top-level module name (KeyError for a library not listed)."""
    return _BY_MODULE[module]


def with_role(role: str) -> tuple[Library, ...]:
    """The libraries with this role, in the list's order."""
    return tuple(lib for lib in LIBRARIES if role in lib.roles)


MODEL_LIBRARIES = frozenset(lib.module for lib in with_role("models"))
PLUMBING_LIBRARIES = tuple(lib.module for lib in with_role("plumbing"))
PRECISION_LIBRARIES = with_role("precision")
APEX_CONSUMERS = tuple(lib.module for lib in with_role("uses-apex"))
VERSIONED = tuple(lib.module for lib in with_role("version"))
# what `explain` looks up on this machine (evidence for their families), in the order it shows them
EXPLAIN_ENVIRONMENT = tuple(library(m) for m in ("apex", "flash_attn", "xformers", "oneflow", "onediff"))
ONEFLOW_STACK = tuple(lib.module for lib in with_role("oneflow"))
