"""The watch's judgement of one torch call: its one job is what happens to an op the mode did not
pass straight through.

Before the op runs: an op with a contract is judged against it (`check_contract`), any other op
for a silent promotion (`scan`); a mismatch is a finding (a repeat counts on the first one), which
strict mode raises and fix mode cures by casting the odd operand. After it: its new floating
outputs get the origin of their dtype (`tag`, `tag_copy`). When it raises: the failure becomes a
finding (`on_failure`). The state it reports into (report, names, provenance, module stack) is the
session's; the mode binds these methods once, so a call costs no extra layer.
"""

from __future__ import annotations

from typing import Any

import torch

from ..catalog.family_codes import SILENT_PROMOTION
from ..errors import DtypeMismatchError
from . import contained, failures, findings
from .contracts import LOW_DTYPES, Contract, Mismatch, Scene, Slot, bind, judge, put
from .mode import CAST, Generic
from .provenance import USER, Tag, caller_frames, frame_kind, qualified_op_name
from .tagging import autocast_dtype as _autocast_dtype


class OpJudge:
    """Judges, tags and records the ops of one session (`session.Session`, whose state it reads)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._tagger = session.tagger
        self._scene = Scene(_autocast_dtype, session.stack.param_dtype, self._in_user_code)
        self._seen: dict[tuple, Any] = {}  # (module path, op, code, operand dtypes) -> its finding

    # ---- ops with a contract -----------------------------------------------------------------
    def check_contract(self, func: Any, c: Contract, args: tuple, kwargs: dict) -> tuple:
        slots = bind(c, args, kwargs)
        inputs = [s.tensor for s in slots if s.tensor.is_floating_point()]
        m = judge(c, slots, self._scene)
        if m is None:
            return args, kwargs, inputs, None
        finding = self._report(c.op, slots, m, m.context)
        if m.code == SILENT_PROMOTION:  # cat/stack: a float32 island is judged as any promotion's
            contained.judge(self.session, finding, inputs)
        mode = self.session.mode
        if mode == "strict":
            raise DtypeMismatchError(findings.note_text(finding), finding)
        if mode == "fix":
            args, kwargs = self._cast(args, kwargs, m, finding)
            inputs = [s.tensor for s in bind(c, args, kwargs) if s.tensor.is_floating_point()]
        return args, kwargs, inputs, finding

    def _in_user_code(self) -> bool:
        inner, _ = caller_frames(3)
        if inner is not None and frame_kind(inner[0]) == USER:
            return True
        meta = self.session.report.meta
        meta["library_promotions"] = meta.get("library_promotions", 0) + 1
        return False

    def _report(self, op: str, slots: list[Slot], m: Mismatch, context: set[str]) -> Any:
        s = self.session
        module = s.stack.top
        path = s.names.module(module)
        what = (op, m.code, tuple((slot.role, slot.tensor.dtype) for slot in slots))
        key = (path, *what)
        known = self._seen.get(key) or s.blocks.met(what, path)
        if known is not None and not s.repeats.rebuild(known):
            s.repeats.found()
            known.count += 1
            return known
        if s.mode == "fix":
            context.add("fix-mode")
        odd = {id(slot) for slot in m.odd}
        finding, fix_context = findings.build(
            m.code,
            op,
            [findings.Seen(slot.role, slot.tensor, odd=id(slot) in odd) for slot in slots],
            expected=m.expected,
            names=s.names,
            prov=s.prov,
            module=module,
            root=s.stack.stack[0] if s.stack.stack else s.root,
            context=context,
            depth=4,
        )
        if s.mode == "fix":
            acts = [f"cast {o.role} {str(o.tensor.dtype)[6:]} -> {str(m.expected)[6:]}" for o in m.odd]
            finding.data["action"] = "; ".join(acts)
            finding.message += " (fix mode: " + "; ".join(acts) + ")"
        finding = s.add_finding(finding, fix_context)
        self._seen[key] = finding
        s.blocks.first(what, path, finding)
        return finding

    def forget(self, finding: Any) -> None:
        """A withdrawn finding (failures.withdraw): the same mismatch met again builds a new one."""
        for key in [k for k, v in self._seen.items() if v is finding]:
            del self._seen[key]
        self.session.blocks.forget(finding)

    def _cast(self, args: tuple, kwargs: dict, m: Mismatch, finding: Any) -> tuple[tuple, dict]:
        prov = self.session.prov
        module = self.session.stack.top
        for s in m.odd:
            new = s.tensor.to(m.expected)
            prev = prov.lookup(s.tensor)
            inner, user = caller_frames(4)
            prov.set(
                new,
                Tag(
                    "cast", new.dtype, "dtype-doctor fix", None, module, inner, user, (prev,) if prev else ()
                ),
            )
            args, kwargs = put(args, kwargs, s.where, new)
        return args, kwargs

    # ---- every other op: silent promotion ---------------------------------------------------
    def scan(self, func: Any, kind: Any, args: tuple, kwargs: dict) -> tuple:
        if kind is CAST:
            return args, kwargs, [a for a in args[:1] if isinstance(a, torch.Tensor)], None
        floats: list[torch.Tensor] = []
        for a in args:
            if isinstance(a, torch.Tensor):
                if a.is_floating_point():
                    floats.append(a)
            elif type(a) is list or type(a) is tuple:
                floats.extend(x for x in a if isinstance(x, torch.Tensor) and x.is_floating_point())
        if kwargs:
            floats.extend(v for v in kwargs.values() if isinstance(v, torch.Tensor) and v.is_floating_point())
        if len(floats) < 2 or not kind.promotes:
            return args, kwargs, floats, None
        d0 = floats[0].dtype
        if all(f.dtype == d0 for f in floats):
            return args, kwargs, floats, None
        return self._promotion(func, kind, args, kwargs, floats)

    def _promotion(self, func: Any, kind: Generic, args: tuple, kwargs: dict, floats: list) -> tuple:
        wide = [f for f in floats if f.dim() > 0]  # 0-dim tensors do not promote
        dtypes = {f.dtype for f in wide}
        if len(dtypes) < 2 or not dtypes & set(LOW_DTYPES):
            return args, kwargs, floats, None
        autocast_to = _autocast_dtype(wide[0].device.type)
        if autocast_to is not None and dtypes <= {torch.float32, autocast_to}:
            return args, kwargs, floats, None  # what autocast does on purpose
        session = self.session
        if session.tool_rerun() or not self._in_user_code():
            return args, kwargs, floats, None
        slots: list[Slot] = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                slots.append(Slot(f"operand{i}", a, ("a", i)))
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                slots.append(Slot(k, v, ("k", k)))
        slots = [s for s in slots if s.tensor.dim() > 0]
        if not slots:
            return args, kwargs, floats, None
        context_dt = session.stack.param_dtype()
        low = [s.tensor.dtype for s in slots if s.tensor.dtype in LOW_DTYPES]
        expected = context_dt if context_dt in {s.tensor.dtype for s in slots} else low[0]
        m = Mismatch(expected, [s for s in slots if s.tensor.dtype != expected], SILENT_PROMOTION)
        finding = self._report(qualified_op_name(func), slots, m, {"promotion"})
        contained.judge(session, finding, [s.tensor for s in slots])
        if session.mode == "strict":
            raise DtypeMismatchError(findings.note_text(finding), finding)
        if session.mode == "fix":
            args, kwargs = self._cast(args, kwargs, m, finding)
            floats = [f.to(expected) if f.dim() > 0 else f for f in floats]
        return args, kwargs, floats, finding

    # ---- after the op: origins of its outputs ------------------------------------------------
    def tag(self, func: Any, kind: Any, inputs: Any, out: Any) -> None:
        """Give each new floating output the origin of its dtype (tagging.Tagger)."""
        self._tagger.tag(func, kind, inputs, out)

    def tag_copy(self, src: Any, out: torch.Tensor) -> None:
        try:
            self._tagger.tag_copy(src, out)
        except Exception as exc:
            self.session.internal_error(exc)

    # ---- when the op itself raises -----------------------------------------------------------
    def on_failure(
        self, exc: BaseException, func: Any, kind: Any, args: tuple, kwargs: dict, finding: Any
    ) -> None:
        session = self.session
        session.repeats.found()
        if session.tool_rerun():
            return  # the numerics monitor's own float32 re-run failed: not the user's program
        try:
            failures.on_failure(session, exc, func, kind, args, kwargs, finding)
        except Exception as err:
            session.internal_error(err)
