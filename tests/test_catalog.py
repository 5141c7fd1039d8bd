"""The catalog is data: every family complete, every regex sound, no torch anywhere in it."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from dtype_doctor import catalog, explain
from dtype_doctor.catalog.context import CONTEXT_SIGNALS, REFINEMENTS
from dtype_doctor.dtypes import canonical

REQUIRED = [
    "matmul-dtype-mismatch",
    "scalar-type-mismatch",
    "conv-weight-dtype-mismatch",
    "conv-bias-dtype-mismatch",
    "norm-dtype-mismatch",
    "attention-dtype-mismatch",
    "flash-attention-dtype",
    "index-put-dtype-mismatch",
    "loss-dtype-mismatch",
    "oneflow-infer-dtype",
    "half-unsupported-kernel",
    "fp16-gradient-unscale",
    "grad-scaler-overflow",
    "nonfinite-values",
    "overflow-on-cast",
    "bf16-unsupported-hardware",
    "cudnn-half-unsupported",
    "apex-conflict",
    "autocast-half-conflict",
    "optimizer-state-dtype",
    "mps-dtype-unsupported",
    "quantized-compute-dtype",
    "jit-fuser-half",
    "unknown",
]

RECORDED = runpy.run_path(str(Path(__file__).parent / "data" / "recorded_messages.py"))["RECORDED"]
CATALOG_DIR = Path(catalog.__file__).parent


def test_every_required_family_is_there_with_text_and_fixes():
    codes = set(catalog.codes())
    assert set(REQUIRED) <= codes
    for code in REQUIRED:
        fam = catalog.family(code)
        assert fam.title and fam.cause and fam.fixes, code
        if code != "unknown":
            assert fam.patterns and fam.keywords, code


def test_catalog_never_imports_torch():
    for path in CATALOG_DIR.glob("*.py"):
        source = path.read_text()
        assert not re.search(r"^\s*(import torch|from torch)", source, re.M), path.name


def test_every_pattern_has_needles_that_can_occur_in_its_match():
    for fam in catalog.FAMILIES:
        for pat in fam.patterns:
            re.compile(pat.regex)
            assert pat.needles, (fam.code, pat.regex)
            for group in re.compile(pat.regex).groupindex:
                assert group.isidentifier()


@pytest.mark.parametrize(("code", "text"), RECORDED, ids=[f"{c}-{i}" for i, (c, _) in enumerate(RECORDED)])
def test_recorded_messages_from_other_platforms_find_their_family(code, text):
    report = explain(text)
    assert report.findings[0].code == code, report.findings[0]


def test_every_family_is_covered_by_a_recorded_or_torch_message():
    covered = {code for code, _ in RECORDED}
    assert set(REQUIRED) - {"unknown"} <= covered


def test_refinements_and_signals_name_real_families_and_scopes():
    codes = set(catalog.codes())
    for ref in REFINEMENTS:
        assert ref.to in codes and ref.codes <= codes
    assert {s.scope for s in CONTEXT_SIGNALS} <= {"op", "local", "log"}


def test_fix_templates_format_with_and_without_names():
    for code in catalog.codes():
        if catalog.family(code).severity != "info":  # info families (a dtype map) report, they fix nothing
            assert catalog.fixes_for(code) or catalog.family(code).fixes, code
        for fix in catalog.fixes_for(code, module="self.linear_1", tensor="sample", dtype="torch.float16"):
            assert "<" not in fix.title, (code, fix.title)


SPELLINGS = {
    "float32": [
        "Float",
        "float",
        "torch.float32",
        "torch.float",
        "torch.FloatTensor",
        "torch.cuda.FloatTensor",
        "kFloat",
        "CUDAFloatType",
        "at::kFloat",
        "fp32",
        "f32",
        "oneflow.float32",
        "np.float32",
    ],
    "float16": [
        "Half",
        "half",
        "c10::Half",
        "struct c10::Half",
        "class c10::Half",
        "at::Half",
        "torch.float16",
        "torch.half",
        "torch.HalfTensor",
        "torch.cuda.HalfTensor",
        "kFloat16",
        "kHalf",
        "__half",
        "CUDA_R_16F",
        "fp16",
        "flow.float16",
    ],
    "bfloat16": [
        "BFloat16",
        "c10::BFloat16",
        "struct c10::BFloat16",
        "torch.bfloat16",
        "CUDABFloat16Type",
        "CPUBFloat16Type",
        "torch.cuda.BFloat16Tensor",
        "kBFloat16",
        "__nv_bfloat16",
        "CUDA_R_16BF",
        "bf16",
    ],
    "float64": ["Double", "double", "torch.float64", "torch.cuda.DoubleTensor", "kDouble"],
    "int64": ["Long", "torch.int64", "torch.LongTensor", "torch.cuda.LongTensor", "kLong", "kInt64"],
    "int32": ["Int", "torch.int32", "torch.IntTensor"],
    "uint8": ["Byte", "torch.uint8", "torch.ByteTensor"],
    "bool": ["Bool", "torch.bool", "torch.BoolTensor"],
    "complex32": ["ComplexHalf", "torch.complex32"],
    "float8_e4m3fn": ["Float8_e4m3fn", "torch.float8_e4m3fn"],
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_canonical_knows_every_spelling(name):
    for spelling in SPELLINGS[name]:
        assert canonical(spelling) == name, spelling


def test_canonical_refuses_words_that_are_not_dtypes():
    for word in ["mat1", "type", "Tensor", "input", "", None, "CUDA", "torch.cuda"]:
        assert canonical(word) is None, word
