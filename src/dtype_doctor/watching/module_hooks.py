"""The watch at module calls: its one job is what the module stack (modules.ModuleStack) calls back.

A root call begins (`on_enter`): it becomes the session's root, its inputs get their origins, the
call is kept for the fixes' replay and told apart as a repeat of a call seen clean; a root the
user named, called inside another module (`on_nested`), is entered the same way; a half model
under autocast of the other half dtype is a finding before a norm or cat fails. An outermost call
returns (`on_module_exit`): its outputs are tagged and its dead intermediates' tags swept. The
state it reads and writes (root, calls, names, provenance, report) is the session's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..catalog.family_codes import AUTOCAST_HALF_CONFLICT
from ..errors import DtypeMismatchError
from ..signatures import argument_names
from . import call_memo, findings
from .contracts import LOW_DTYPES
from .tagging import autocast_dtype as _autocast_dtype

_no_torch_function = torch._C.DisableTorchFunction
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


class ModuleHooks:
    """The module-call callbacks of one session (`session.Session`, whose state they keep)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._explicit: list[nn.Module] = session.explicit
        self._explicit_ids: set[int] = session.explicit_ids
        self._autocast_reported: set[tuple] = set()  # (device, autocast dtype, parameter dtype)

    def on_enter(self, module: nn.Module, args: tuple, kwargs: dict | None, is_root: bool) -> None:
        session = self.session
        explicit = any(module is r for r in self._explicit)
        if is_root and not explicit:
            # entered through a method other than forward (vae.decode(z) → post_quant_conv):
            # the method's owner is the root and its arguments are the model inputs
            entry = findings.entry_call(4)
            if entry is not None and entry[0] is not module:
                owner, method, arguments = entry
                session.root = owner
                if not self._explicit:
                    session.names.add_root(owner)
                session.tagger.tag_inputs(owner, f"{type(owner).__name__}.{method}", list(arguments.items()))
                self._begin_root(module, owner, method, (), arguments)
                self._check_autocast_params(module)
                return
        if is_root:
            session.root = module
            self._begin_root(module, module, "__call__", args, dict(kwargs or {}))
            if not self._explicit:
                session.names.add_root(module)
        if is_root or explicit:
            names = argument_names(module) or []
            items = [(names[i] if i < len(names) else f"args[{i}]", v) for i, v in enumerate(args)]
            items += list((kwargs or {}).items())
            session.tagger.tag_inputs(module, f"{type(module).__name__}.forward", items)
        self._check_autocast_params(module)

    def _begin_root(
        self, module: nn.Module, owner: nn.Module, method: str, args: tuple, kwargs: dict
    ) -> None:
        """A root call begins (`owner.method(...)`, entered through `module`): kept for the replays,
        whole-model answers kept while it runs (call_memo), and is it a repeat of a clean call?"""
        session = self.session
        autocast = _autocast_now()
        session.calls[id(module)] = (owner, method, args, kwargs, autocast)
        call_memo.begin()
        session.repeats.begin(owner, args, kwargs, autocast, len(session.report.findings), module)

    def on_nested(self, module: nn.Module, args: tuple) -> None:
        """A module call inside another (runs for every module: nothing to do unless autocast is on)."""
        if id(module) in self._explicit_ids:
            with _no_torch_function():
                self.on_enter(module, args, None, False)
        elif _any_autocast():
            with _no_torch_function():
                self._check_autocast_params(module)

    def _check_autocast_params(self, module: nn.Module) -> None:
        """A half model under autocast of the other half dtype: report before a norm or cat fails."""
        for dev in ("cpu", "cuda"):
            autocast_to = _autocast_dtype(dev)
            if autocast_to is None or autocast_to not in LOW_DTYPES:
                continue
            for pname, p in module._parameters.items():
                if p is None or p.dtype not in LOW_DTYPES or p.dtype == autocast_to or p.device.type != dev:
                    continue
                key = (dev, autocast_to, p.dtype)
                if key in self._autocast_reported:
                    return
                self._autocast_reported.add(key)
                session = self.session
                finding, fix_context = findings.build(
                    AUTOCAST_HALF_CONFLICT,
                    f"torch.autocast('{dev}', dtype={autocast_to})",
                    [findings.Seen("weight", p, odd=True)],
                    expected=autocast_to,
                    names=session.names,
                    prov=session.prov,
                    module=module,
                    root=session.root,
                    context={"autocast", "module-params"},
                    message=(
                        f"module '{session.names.module(module) or '<root>'}' ({type(module).__name__}) has "
                        f"{str(p.dtype)[6:]} parameter '{pname}' but runs under torch.autocast('{dev}', "
                        f"dtype={autocast_to}): two precision managers disagree; norms and cat will fail"
                    ),
                    depth=4,
                )
                session.add_finding(finding, fix_context)
                if session.mode == "strict":
                    raise DtypeMismatchError(findings.note_text(finding), finding)
                return

    def on_module_exit(self, module: nn.Module, args: tuple, output: Any) -> None:
        """An outermost module call returned: its outputs are "output of <Class> at file:line"; the
        tags of the call's dead intermediates go (a table of one step's tags, not a sawtooth)."""
        session = self.session
        if session.active:
            session.repeats.end(output is not None, len(session.report.findings))
            call_memo.end()
            session.tagger.tag_module_output(module, args, output)
            session.prov.sweep()


def _autocast_now() -> tuple:
    """The autocast in force at a call, (device, dtype) pairs: a replay of the call runs under it."""
    return tuple((d, _autocast_dtype(d)) for d in ("cpu", "cuda") if _autocast_dtype(d) is not None)
