"""The normaliser: one spelling per dtype and per line, any encoding; fuzzed, linear on huge lines."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtype_doctor import catalog, explain
from dtype_doctor.catalog.errors import TRIGGERS
from dtype_doctor.explaining.normalize import clean, decode, view

MSG = "mat1 and mat2 must have the same dtype, but got Float and Half"


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("Float", "float32"),
        ("float", "float32"),
        ("c10::Float", "float32"),
        ("struct c10::Half", "float16"),
        ("class c10::BFloat16", "bfloat16"),
        ("at::Half", "float16"),
        ("at::kBFloat16", "bfloat16"),
        ("kFloat16", "float16"),
        ("CUDA_R_16F", "float16"),
        ("CUDA_R_16BF", "bfloat16"),
        ("'Half'", "'float16'"),
        ("fp16", "float16"),
        ("FP16", "float16"),
        ("half", "float16"),
        ("bf16", "bfloat16"),
        ("torch.float16", "float16"),
        ("torch.bfloat16", "bfloat16"),
        ("Long", "int64"),
        ("Char", "int8"),
        ("Double", "float64"),
    ],
)
def test_every_dtype_spelling_has_one_canonical_name(spelling, canonical):
    assert view(f"got {spelling} here") == f"got {canonical} here"


def test_needles_are_written_over_the_view_and_each_holds_a_trigger():
    # Needles are looked for in the view; triggers (lower-case, no dtype name) find the lines in
    # the raw text. A needle without a trigger would cost one more pass over a 50 MB log.
    assert all(t == t.lower() for t in TRIGGERS)
    for fam in catalog.FAMILIES:
        for pat in fam.patterns:
            for needle in pat.needles:
                assert view(needle).lower() == needle.lower(), (fam.code, needle)
                assert any(t in needle.lower() for t in TRIGGERS), (fam.code, needle)


def test_legacy_tensor_types_keep_their_device():
    line = "Input type (torch.cuda.HalfTensor) and weight type (torch.HalfTensor), CUDAFloatType"
    assert view(line) == line


def test_view_spaces_quotes_backticks_and_links():
    assert view("but got: float!= c10::Half") == "but got: float32 != float16"
    assert view("expected mat1 and mat2 to   have") == "expected mat1 and mat2 to have"
    assert view("for argument #2 \u2018target\u2019") == "for argument #2 'target'"
    assert view("`RuntimeError: x`") == "RuntimeError: x"
    assert view("[index_put](https://pytorch.org/docs/x.html#y) requires") == "index_put requires"


@pytest.mark.parametrize(
    "prefix",
    [
        "2024-05-02 14:31:07,118 - ERROR - ",
        "[2023-11-25 14:03:17,898] ",
        "E1123 12:00:00.123456 4242 engine.cpp:42] ",
        "!!! Exception during processing!!! ",
        "> ",
        "E       ",
        "│ ",
    ],
)
def test_logger_prefixes_are_peeled_and_ranks_kept(prefix):
    assert view(prefix + MSG) == view(MSG)
    assert view("[rank3]: " + prefix + MSG) == "[rank3]: " + view(MSG)


def test_clean_keeps_one_line_per_line():
    text = "a\x1b[31mred\x1b[0m\r\nb [1m[38;2;255;000;000mError[0m: x\rc\uff1a\uff08d\uff09"
    assert clean(text) == "ared\nb Error: x\nc: (d)"


def test_decode_utf16_and_bom_logs():
    text = "Traceback\n" + MSG + "\n"
    assert decode(codecs.BOM_UTF8 + text.encode()) == text
    assert decode(text.encode("utf-16")) == text  # PowerShell `>` redirection
    assert decode(text.encode("utf-16-le")) == text
    assert decode(text.encode("utf-16-be")) == text
    assert explain(text.encode("utf-16")).codes() == ["matmul-dtype-mismatch"]


def test_fullwidth_and_wrapped_messages_are_read():
    assert explain("RuntimeError\uff1a" + MSG.replace(",", "\uff0c")).codes() == ["matmul-dtype-mismatch"]
    wrapped = "RuntimeError: expected mat1 and mat2 to have the same dtype, but got:\nfloat != c10::Half\n"
    f = explain(wrapped).findings[0]
    assert f.code == "matmul-dtype-mismatch"
    assert [(o.role, o.dtype) for o in f.operands] == [("input", "float32"), ("weight", "float16")]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('RuntimeError: "LayerNormKernelImpl" not\nimplemented for \'Half\'', "half-unsupported-kernel"),
        ("RuntimeError: Function AddBackward0 returned an\ninvalid gradient at index 1 - expected type\n"
         "torch.cuda.HalfTensor but got torch.cuda.FloatTensor", "loss-dtype-mismatch"),
        ("[rank1]: RuntimeError: Index put requires the\n[rank1]: source and destination dtypes match, got "
         "BFloat16\n[rank1]: for the destination and Float for the source.", "index-put-dtype-mismatch"),
    ],
)  # fmt: skip
def test_messages_wrapped_anywhere_are_joined(text, code):
    assert explain(text).codes()[0] == code


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PIECES = ["Half", "c10::", "struct ", "k", "Float", "16", "torch.", "cuda.", "Tensor", "!=", " ", "`", "*", "[", "](",
          ")", "\r", "\n", "\x1b[", "m", "E1123 12:00:00.1 1 a.cc:1] ", "[rank0]: ", "> ", "\uff1a", "\u2019"]  # fmt: skip


@FUZZ
@given(st.text(max_size=2000))
def test_normaliser_never_fails_on_any_text(text):
    cleaned = clean(text)
    assert cleaned.count("\n") >= text.count("\n") - text.count("\r\n")
    for line in cleaned.split("\n"):
        view(line)


@FUZZ
@given(st.binary(max_size=2000))
def test_decode_never_fails_on_any_bytes(data):
    assert isinstance(decode(data), str)


@FUZZ
@given(st.lists(st.sampled_from(PIECES), max_size=200))
def test_normaliser_on_spelling_soup(pieces):
    text = "".join(pieces)
    for line in clean(text).split("\n"):
        view(line)


def test_normaliser_on_huge_lines():
    # Lines built to make a backtracking regex explode (prefix starts, half spellings, unclosed
    # links and escapes), 10 MB each, are normalised at once and correctly. No timing assertion:
    # a superlinear regex would not return.
    unit = "c10::Half != float "  # 2 MB of dtype spellings: 200 000 rewrites
    line = unit * (2_000_000 // len(unit))
    assert view(clean(line)) == "float16 != float32 " * (2_000_000 // len(unit))
    for filler in (
        "[",
        "](",
        "\x1b[",
        "E1123 12:00:00.1 ",
        "`*",
        "struct c10::",
        "dtype: ",
        "[rank0]: ",
        "2024-",
    ):
        text = filler * (10_000_000 // len(filler))
        assert isinstance(view(clean(text)), str)
