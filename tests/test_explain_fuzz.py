"""Arbitrary text and bytes never crash explain; pathological lines stay linear."""

from __future__ import annotations

import signal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtype_doctor import catalog, explain
from dtype_doctor.report import Report

NEEDLES = sorted({n for fam in catalog.FAMILIES for p in fam.patterns for n in p.needles})
PIECES = [
    *NEEDLES,
    "Float", "Half", "c10::Half", "struct c10::Half", "torch.cuda.HalfTensor", "kFloat16", "(", ")", ", ",
    "[rank3]: ", '  File "/x/torch/nn/modules/linear.py", line 114, in forward\n', "    self.proj(x)\n",
    "Traceback (most recent call last):\n", "\n", "\r\n", " ", "RuntimeError: ", "^^^^\n", "nan", "loss:",
    "\uff1a", "\uff0c", "\x1b[31m", "[1m", "E1123 12:00:00.1 1 a.cc:1] ", "```", "](", " .vs ", "Tensor but got ",
    "\r", "!!! Exception during processing !!! ", "> ", "\u2019", "black images", "loss scale", "fp16",
]  # fmt: skip

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _valid(report: Report) -> None:
    assert report.findings
    data = report.to_dict()
    assert Report.from_dict(data).to_dict() == data
    for f in report.findings:
        assert f.code in catalog.codes()
        for ev in f.evidence:
            assert ev.line is None or ev.line >= 1


@FUZZ
@given(st.text(max_size=3000))
def test_any_text(text):
    _valid(explain(text))


@FUZZ
@given(st.binary(max_size=3000))
def test_any_bytes(data):
    _valid(explain(data))


@FUZZ
@given(st.lists(st.sampled_from(PIECES), max_size=120))
def test_text_made_of_needles_and_spellings(pieces):
    _valid(explain("".join(pieces)))


def test_pathological_lines_are_linear():
    # Long lines built to make a backtracking regex explode. Each must still give a valid report, and
    # the real error after 20000 rank prefixes must still be read in full. A hang fails via the alarm.
    previous = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(120)
    try:
        for needle in NEEDLES:
            for filler in ("a", " ", "(", ":", "c10::"):
                _valid(explain((needle + filler * 500) * 3))
                _valid(explain(needle.join(filler * 10 for _ in range(50))))
        (unknown,) = explain('File "' + "x" * 100000).findings
        assert unknown.code == "unknown"
        (found,) = explain(
            "[rank1]: " * 20000 + "mat1 and mat2 must have the same dtype, but got Float and Half"
        ).findings
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert found.code == "matmul-dtype-mismatch"
    assert {o.role: o.dtype for o in found.operands} == {"input": "float32", "weight": "float16"}
    assert found.location.rank == 1


def _hang(signum, frame):
    raise AssertionError("explain did not return within 120 s on a pathological line: a regex backtracks")
