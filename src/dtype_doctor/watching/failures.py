"""When the user's code raises: name the failing op's operands, note the diagnosis on the
exception, and make sure the report holds the crash as an error finding.

The user's exception always reaches them unchanged (type, message, frames); the tool only
adds notes and unlinks its own frames.
"""

from __future__ import annotations

import re
import sys
import traceback
from itertools import takewhile
from typing import Any

import torch

from .. import remedies
from ..catalog import family_codes
from ..catalog.libraries import EXPLAIN_ENVIRONMENT
from ..dtypes import canonical
from ..errors import carried_findings
from ..explaining.family import family_of
from ..render.fold import fold_prose_line, terminal_width
from ..report import Location, Operand
from ..tracing.files import TOOL_DIR
from . import autograd_functions, findings, numpy_seam, promoted_root, snippets, value_births, value_limits
from .contracts import Contract, Slot, bind
from .names import loaded_names, visible
from .notes import BRIEF, brief_note
from .provenance import USER, frame_kind, qualified_op_name, short_path
from .wanted_floating import wanted_floating

EARLIER = "  earlier: "  # the note's lines on silent promotions seen before the failure

Session = Any  # watch.session.Session, not imported: no import circle

TENSOR_REPR_DTYPE = re.compile(r"dtype=torch\.\w+")
DTYPE_TEXT = re.compile(r"dtype|scalar ?type|Half|Float|BFloat16|same type|ScalarType", re.IGNORECASE)
# a GPU library's status (cuBLAS, cuDNN) names no dtype: explain's rules tell a dtype refusal from the rest
KERNEL_LIBRARIES = frozenset(lib.module for lib in EXPLAIN_ENVIRONMENT)
NUMPY_DTYPE = re.compile(r"\bGot unsupported ScalarType\b")  # Tensor.numpy() of bfloat16/float8
LIBRARY_STATUS = re.compile(r"CUBLAS_STATUS_|CUDNN_STATUS_|cuDNN error")


def code_for_message(text: str) -> str:
    """The family of an error message, read by explain's rules; the generic family when it names none."""
    try:
        return family_of(text) or family_codes.SCALAR_TYPE_MISMATCH
    except Exception:  # the tool never replaces the user's error with its own
        return family_codes.SCALAR_TYPE_MISMATCH


def _family(exc: BaseException, by_library: bool) -> str:
    """The message's family; where a kernel library with rules of its own (apex, flash-attn,
    xformers, OneFlow) raised it from the frames below the failing call (`by_library`), the family
    `explain` reads off the message and those frames."""
    if by_library:
        found = _read_as_explain_does(_traceback_text(exc), Location())
        if found is not None:
            return found.code
    return code_for_message(str(exc))


def _kernel_library_raised(tb: Any) -> bool:
    while tb is not None:
        parts = tb.tb_frame.f_code.co_filename.replace("\\", "/").split("/")
        if KERNEL_LIBRARIES.intersection(parts[:-1]):
            return True
        tb = tb.tb_next
    return False


def dtype_failure(text: str, operands: tuple = ()) -> bool:
    """Does this error message say an op failed on its operands' dtypes? A GPU library's status
    counts when explain names its family and an operand is in a reduced-precision dtype."""
    if DTYPE_TEXT.search(text):
        return True
    if LIBRARY_STATUS.search(text) is None:
        return False
    reduced = any(
        isinstance(t, torch.Tensor) and t.is_floating_point() and t.element_size() < 4 for t in operands
    )
    try:
        return reduced and family_of(text) is not None
    except Exception:  # the tool never replaces the user's error with its own
        return False


def _noted(exc: BaseException) -> bool:
    return any(str(n).startswith("dtype-doctor") for n in getattr(exc, "__notes__", ()))


def on_failure(
    session: Session, exc: BaseException, func: Any, kind: Any, args: tuple, kwargs: dict, finding: Any
) -> None:
    """An op raised: note the diagnosis (the finding made before it ran, or one made now)."""
    if finding is not None and finding.code == family_codes.SILENT_PROMOTION:
        withdraw(session, finding)  # the op raised: nothing was promoted
        finding = None
    if _noted(exc):
        return
    if finding is None or finding.severity.value != "error":
        # no finding, or only a warning (a promotion at a fused op whose kernel then failed):
        # the crash itself is the error the user must read
        if not dtype_failure(str(exc), (*args, *kwargs.values())):
            return
        finding = _failure_finding(session, exc, func, kind, args, kwargs) or finding
    if finding is not None:
        try:  # a custom Function's backward run without its forward's autocast state
            autograd_functions.link(finding, _user_frame())
        except Exception as err:  # never at the cost of the user's error
            session.internal_error(err)
        promoted_root.link(session.report.findings, finding)  # the root of a promotion before it
        session.raised[id(exc)] = finding  # a worker thread's crash names its thread on it
        session.keep_failing_call()
        if hasattr(exc, "add_note"):
            exc.add_note(_note(session, finding) + _earlier(session, finding))


def withdraw(session: Session, finding: Any) -> None:
    """Take back one occurrence of `finding` (recorded for an op that then raised, or for a promotion
    its module cast back)."""
    finding.count -= 1
    if finding.count > 0:
        return
    recorded = session.report.findings
    for i in range(len(recorded) - 1, -1, -1):
        if recorded[i] is finding:
            del recorded[i]
            session.fix_contexts.pop(id(finding), None)
            break
    session.judge.forget(finding)


def _earlier(session: Session, finding: Any) -> str:
    """Silent promotions seen before a failure: often where the wrong dtype came in."""
    earlier = [
        f for f in session.report.findings if f.code == family_codes.SILENT_PROMOTION and f is not finding
    ]
    lines = [
        folded
        for f in earlier[:3]
        for folded in fold_prose_line(
            f"{EARLIER}[silent-promotion] {f.message} at {f.location.file}:{f.location.line}",
            terminal_width(),
            hang=len(EARLIER) - 2,
        )
    ]
    return "\n" + "\n".join(lines) if lines else ""


def _failure_finding(
    session: Session, exc: BaseException, func: Any, kind: Any, args: tuple, kwargs: dict
) -> Any:
    """An op with no contract failed on dtypes: name its operands and their origins."""
    if isinstance(kind, Contract):
        slots = bind(kind, args, kwargs)
        op = kind.op
    else:
        slots = _slots(args, kwargs)
        op = qualified_op_name(func)
    if not slots:
        return None
    by_library = _kernel_library_raised(exc.__traceback__)
    wanted = wanted_floating(str(exc), [s.tensor for s in slots])  # an integer made for a float
    finding, fix_context = findings.build(
        _family(exc, by_library),
        op,
        [findings.Seen(s.role, s.tensor) for s in slots],
        expected=wanted,
        names=session.names,
        prov=session.prov,
        module=session.stack.top,
        root=session.stack.stack[0] if session.stack.stack else session.root,
        message=f"{op} raised: {str(exc).splitlines()[0][:300]}",
        depth=5,
        severity="error",
    )
    finding.data["raised"] = type(exc).__name__
    if wanted is not None:  # the integer operand is the odd one
        finding.data["odd_roles"] = [o.role for o in finding.operands if o.dtype and "int" in o.dtype]
    if by_library:
        _library_fixes_first(finding)
    if finding.code == family_codes.OVERFLOW_ON_CAST:  # `masked_fill(mask, fill)`: where fill was set
        frame = _user_frame()
        if frame is not None:
            _value_births(finding, frame, frame.f_lineno, str(exc))
    return session.add_finding(finding, fix_context)


def _slots(args: tuple, kwargs: dict) -> list[Slot]:
    """Every tensor operand of a call with no contract, those in a tuple or list argument too (an
    LSTM cell's `(h, c)` state, the tensors of a `torch.cat`)."""
    slots = []
    for key, value in [*enumerate(args), *kwargs.items()]:
        kind, role = ("a", f"operand{key}") if isinstance(key, int) else ("k", key)
        if isinstance(value, torch.Tensor):
            slots.append(Slot(role, value, (kind, key)))
        elif type(value) in (tuple, list):
            slots += [
                Slot(f"{role}[{j}]", x, (kind, key, j))
                for j, x in enumerate(value)
                if isinstance(x, torch.Tensor)
            ]
    return slots


def _library_fixes_first(finding: Any) -> None:
    """The kernel library is the cause (its own dtype rules): its family's fixes go before a cast of
    the model's modules, which would undo a precision the model keeps on purpose (fp32 norms)."""
    from .. import catalog

    ours = {f.title for f in catalog.fixes_for(finding.code)}
    finding.fixes.sort(key=lambda f: f.title not in ours)


def on_exit(session: Session, exc: BaseException) -> None:
    """The `with` block ends with the user's exception: count it, and make a dtype crash a finding."""
    session.report.meta["raised"] = type(exc).__name__
    _renote(session, exc)
    errors = [f for f in session.report.errors if f.code != family_codes.TOOL_INTERNAL_ERROR]
    # a tensor's repr (`assert tensor(4., dtype=torch.float16) == 5`) does not make a dtype crash
    said = TENSOR_REPR_DTYPE.sub("", str(exc))
    carried = carried_findings(exc)  # the tool's own exception: its findings, not its words
    if not errors and carried:
        for finding in carried:
            session.report.add(finding)
        return  # its message already shows them: no note repeating them
    if (
        not errors
        and DTYPE_TEXT.search(said)
        and not isinstance(exc, KeyboardInterrupt)
        and not _own_assert(exc)
    ):
        _crash_finding(session, exc)
    if _noted(exc):
        return
    errors = [f for f in session.report.findings if f.code != family_codes.TOOL_INTERNAL_ERROR]
    if errors and hasattr(exc, "add_note"):
        exc.add_note("\n".join(_note(session, f) for f in errors[-2:]))


def _own_assert(exc: BaseException) -> bool:
    """An `assert` of the user's own code failed: their check of a symptom (an output's dtype, a
    finite loss), which the findings of the run explain; not a dtype error that torch or a library
    raised."""
    if not isinstance(exc, AssertionError):
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and frame_kind(tb.tb_frame.f_code) == USER


def _renote(session: Session, exc: BaseException) -> None:
    """The note written when the op raised, written again now that its fixes are verified and
    ranked (verify runs at the session's end): the note and the report give one ranking."""
    finding = session.raised.get(id(exc))
    notes = getattr(exc, "__notes__", None)
    if finding is None or not isinstance(notes, list):
        return
    for i, note in enumerate(notes):
        if isinstance(note, str) and note.startswith(f"dtype-doctor [{finding.code}]"):
            at = note.find(EARLIER)
            notes[i] = _note(session, finding) + (note[at - 1 :] if at > 0 else "")
            return


def _note(session: Session, finding: Any) -> str:
    """The finding as a note: brief under `dtype-doctor run` (its report, printed after the
    traceback, carries the whole diagnosis and the experiment's cure), else whole."""
    if session.report.tool == "run":
        return brief_note(finding)
    return findings.note_text(finding)


def noted_in(exc: BaseException) -> list[str]:
    """The findings whose diagnosis `exc`'s notes show, as `CODE at WHERE` (the note's headline and
    `at` line: findings.note_text); the console then leaves them out of the same stream."""
    shown = []
    for note in getattr(exc, "__notes__", None) or ():
        lines = str(note).splitlines()
        if BRIEF in " ".join(line.strip() for line in lines):
            continue  # a brief note: the report shows the finding whole
        head = re.match(r"dtype-doctor \[([\w-]+)\]", lines[0]) if lines else None
        at = next((i for i, line in enumerate(lines[:6]) if line.startswith("  at ")), None)
        where = ""
        if at is not None:  # the `at` line and its folded continuation (note_text folds long lines)
            rest = takewhile(lambda line: line.startswith("      "), lines[at + 1 :])
            where = " ".join([lines[at][len("  at ") :], *(line.strip() for line in rest)])
        if head:
            shown.append(f"{head.group(1)} at {where}")
    return shown


def on_thread_exit(session: Session, exc: BaseException, thread: str) -> None:
    """A thread died of `exc` (threading.excepthook): a dtype error is an error finding that names
    the thread; the op's own finding if a watched op raised it, else the crash itself."""
    finding = session.raised.get(id(exc))
    if finding is None:
        if not DTYPE_TEXT.search(TENSOR_REPR_DTYPE.sub("", str(exc))):
            return
        finding = _crash_finding(session, exc)
    finding.data["thread"] = thread
    finding.message = f"{finding.message} (uncaught in thread '{thread}')"


def _crash_finding(session: Session, exc: BaseException) -> Any:
    """A dtype error no watched op saw (raised inside a fused kernel): the crash itself, located
    at the innermost frame of the user's code in the traceback."""
    from .. import catalog

    text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    file = line = function = frame = None
    tb = exc.__traceback__
    while tb is not None:
        if frame_kind(tb.tb_frame.f_code) == USER:
            code, frame = tb.tb_frame.f_code, tb.tb_frame
            file, line, function = short_path(code.co_filename), tb.tb_lineno, code.co_name
        tb = tb.tb_next
    raiser, args = _innermost_module(exc.__traceback__)
    known = raiser if raiser is not None else session.root
    module = session.names.module(known) if known is not None else None
    where = Location(module=module, file=file, line=line, function=function)
    # the frames too when a kernel library raised: apex in them decides the family, as in explain
    read = _traceback_text(exc) if _kernel_library_raised(exc.__traceback__) else str(exc)
    finding = _read_as_explain_does(read, where)
    if finding is None:
        finding = catalog.finding(
            code_for_message(text), message=f"{type(exc).__name__}: {text}", location=where
        )
    if raiser is not None:
        operands = _safe_operands(session, raiser, args)
        if operands:
            finding.operands = operands
    if frame is not None and line is not None:
        _value_births(finding, frame, line, str(exc))
        try:  # a custom Function's backward run without its forward's autocast state
            autograd_functions.link(finding, frame, line)
        except Exception as err:  # never at the cost of the user's error
            session.internal_error(err)
        if NUMPY_DTYPE.search(text):  # NumPy has no bfloat16: the tensor, and the line widened
            numpy_seam.complete(finding, frame, lambda t: findings.origin_of(t, session.names, session.prov))
    finding.data["raised"] = type(exc).__name__
    from ..report import Severity

    finding.severity = Severity.ERROR
    return session.report.add(finding)


def _user_frame() -> Any:
    """The innermost frame of the user's own code on the live stack (the line whose op raised)."""
    f = sys._getframe(1)
    while f is not None and frame_kind(f.f_code) != USER:
        f = f.f_back
    return f


def _value_births(finding: Any, frame: Any, line: int, text: str = "") -> None:
    """A number the target dtype cannot hold, passed on at the failing line: where it was set."""
    target = value_births.target_dtype(finding.operands, text)
    found = value_births.out_of_range(frame, line, target)
    try:
        limits = value_limits.limit_fixes(frame, line, target, found)
    except Exception:  # the fixes are extra: never at the cost of the finding or the user's error
        limits = []
    if limits:  # the dtype's own limit in the user's names: the catalog's placeholder snippets as advice
        mine = visible(frame)
        rest = [snippets.advice(f) if (loaded_names(f.snippet) or set()) - mine else f for f in finding.fixes]
        finding.fixes = remedies.first(rest, *limits)
    if found:
        finding.operands = [*found, *finding.operands]
        said = "; ".join(
            f"{o.role} = {o.name} set at {o.origin.file}:{o.origin.line}" for o in found if o.origin
        )
        finding.message = f"{finding.message} ({said})"


def _traceback_text(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(exc))
    except Exception:  # a broken __str__ or frame: the message alone
        return str(exc)


def _innermost_module(tb: Any) -> tuple[torch.nn.Module | None, list[torch.Tensor]]:
    """The innermost module whose `forward` is on the traceback, and the tensors it was called with:
    a kernel no watched op ran (a compiled extension) raised inside it."""
    found: tuple[torch.nn.Module | None, list[torch.Tensor]] = (None, [])
    while tb is not None:
        frame = tb.tb_frame
        owner = frame.f_locals.get("self") if frame.f_code.co_name == "forward" else None
        if isinstance(owner, torch.nn.Module):
            code = frame.f_code
            names = code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount]
            given = [frame.f_locals.get(n) for n in names]
            found = (owner, [t for t in given if isinstance(t, torch.Tensor) and t.is_floating_point()])
        tb = tb.tb_next
    return found


def _safe_operands(session: Session, module: torch.nn.Module, args: list[torch.Tensor]) -> list:
    """The module's floating inputs and its own parameters, with their origins, when their dtypes
    disagree: which tensor is the odd one, and where it got its dtype."""
    try:
        own = list(module.named_parameters(recurse=False))
        seen = [(f"input{i}" if len(args) > 1 else "input", t) for i, t in enumerate(args)]
        seen += [(n, p) for n, p in own if p.is_floating_point()]
        if len({t.dtype for _, t in seen}) < 2:
            return []
        return [
            Operand(
                role=role,
                dtype=canonical(t.dtype),
                shape=list(t.shape),
                name=origin.name if origin.kind in ("parameter", "buffer", "input") else None,
                origin=origin,
            )
            for role, t in seen
            for origin in [findings.origin_of(t, session.names, session.prov)]
        ]
    except Exception:  # the tool never replaces the user's error with its own
        return []


def _read_as_explain_does(text: str, where: Location) -> Any:
    """The whole message read as `explain` reads it (a TorchScript error names the op's own message
    lines below its first): its family and operands, placed where the program raised it."""
    from ..explaining import explain

    try:
        found = [f for f in explain(text[:65536]).findings if f.code != family_codes.UNKNOWN]
    except Exception:
        return None
    if not found:
        return None
    finding = found[0]
    finding.location = where
    return finding


def _own(tb: Any) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(TOOL_DIR)


def only_own_frames(exc: BaseException) -> bool:
    """Was `exc` raised and caught inside the tool (every frame of its traceback is the tool's)?"""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb is not None:
        if not _own(tb):
            return False
        tb = tb.tb_next
    return True


def hide_own_frames(exc: BaseException) -> None:
    """Unlink the tool's own frames (the mode's __torch_function__) from the user's traceback.

    The exception object, its type, message and the user's frames stay as they are: the traceback
    reads as it would without watch. Like pytest's __tracebackhide__.
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        nxt = tb.tb_next
        if _own(nxt):
            tb.tb_next = nxt.tb_next
        else:
            tb = nxt
