"""`explain` on text as users post it: evidence that decides the family, symptoms, files named as TEXT.

Program-output lines below are quoted from public issue threads (the dev corpus); the words
around them are the kind users add.
"""

from __future__ import annotations

import json

import pytest

from dtype_doctor import explain
from dtype_doctor.cli import main

HALF_FLOAT = "RuntimeError: expected scalar type Half but found Float"


def test_apex_frames_below_the_message_decide_and_are_shown():
    text = (
        "RuntimeError: expected type torch.cuda.FloatTensor but got torch.cuda.HalfTensor\n"
        "> ---> 37                 optimizer.step()\n"
        "> ~/envs/lib/python3.7/site-packages/apex-0.1-py3.7.egg/apex/optimizers/fp16_optimizer.py in step(self)\n"
    )
    f = explain(text).findings[0]
    assert f.code == "apex-conflict"
    assert f.data["refined_from"] == "scalar-type-mismatch"
    assert f.data["decided_by"] == {"apex": "apex/"}
    assert any("scalar-type-mismatch → apex-conflict" in e.text and "apex" in e.text for e in f.evidence)
    assert "pip uninstall -y apex" in f.fixes[0].snippet


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("RuntimeError: Found dtype Long but expected Float", "loss-dtype-mismatch"),
        ("RuntimeError: Expected object of scalar type Long but got scalar type Int for argument #2 'target'",
         "loss-dtype-mismatch"),
        ("RuntimeError: Function AddBackward0 returned an invalid gradient at index 1 - expected type "
         "torch.cuda.HalfTensor but got torch.cuda.FloatTensor", "loss-dtype-mismatch"),
        ("RuntimeError: expected backend CUDA and dtype Float but got backend CUDA and dtype Half",
         "scalar-type-mismatch"),
        ("self and mat2 must have the same dtype, but got Half and Char", "quantized-compute-dtype"),
        ("RuntimeError: expected dtype float for `end` but got dtype c10::BFloat16", "optimizer-state-dtype"),
        ("RuntimeError: [1m[38;2;255;000;000mError[0m: kFloat16 .vs kFloat", "oneflow-infer-dtype"),
        ("Query/Key/Value should either all have the same dtype, or (in the quantized case) Key/Value should "
         "have dtype torch.int32", "attention-dtype-mismatch"),
        ("RuntimeError: Expected attn_mask dtype to be bool or to match query dtype, but got attn_mask.dtype: "
         "float and  query.dtype: struct c10::BFloat16 instead.", "attention-dtype-mismatch"),
        ("torch.jit.script: RuntimeError: default_program(61): error: no suitable conversion function from "
         '"__half" to "float" exists', "jit-fuser-half"),
        ("RuntimeError: CUDNN_BACKEND_OPERATION: cudnnFinalize Failed cudnn_status: CUDNN_STATUS_BAD_PARAM",
         "cudnn-half-unsupported"),
        ("W0215 06:48:41.808522 140192834852672 x2num.py:14] NaN or Inf found in input tensor",
         "nonfinite-values"),
        ("[Rank 0] Overflow detected. Skipping step. Attempted loss scale: 1, reducing to 1",
         "grad-scaler-overflow"),
        ("slow_conv2d_cpu not implemented for 'half'", "half-unsupported-kernel"),
        ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
         "and cpu!", "device-mismatch"),
        ("RuntimeError: Input type (MPSFloatType) and weight type (torch.FloatTensor) should be the same",
         "device-mismatch"),
        ("ValueError: You cannot cast a bitsandbytes model in a new `dtype`. Make sure to load the model using "
         "`from_pretrained`", "quantized-compute-dtype"),
        ("TypeError: Got unsupported ScalarType BFloat16", "half-unsupported-kernel"),
        ("training with apex amp O1 gives RuntimeError: expected scalar type Half but found Float", "apex-conflict"),
        ('  File "/venv/site-packages/xformers/ops/fmha/__init__.py", line 326, in _memory_efficient_attention\n'
         "    return _fMHA.apply(\n" + HALF_FLOAT, "attention-dtype-mismatch"),
    ],
)  # fmt: skip
def test_real_spellings_find_their_family(text, code):
    assert explain(text).codes()[0] == code


def test_rank_prefixes_and_cr_line_ends():
    text = '[rank1]: Traceback (most recent call last):\r\n[rank1]:   File "t.py", line 3, in <module>\r\n'
    text += "[rank1]: " + HALF_FLOAT + "\r\n"
    f = explain(text).findings[0]
    assert f.code == "scalar-type-mismatch"
    assert (
        f.location is not None and f.location.rank == 1 and f.location.file == "t.py" and f.location.line == 3
    )


@pytest.mark.parametrize(
    ("text", "code", "confirm"),
    [
        ("loss becomes nan with fp16", "nonfinite-values", "dtype-doctor run --numerics"),
        ("the VAE in fp16 always gives black images on this card", "nonfinite-values", "--numerics"),
        ("the loss scale keeps dropping until it is 0", "grad-scaler-overflow", "--numerics"),
        ("Adam in half precision trains worse than SGD from the start", "optimizer-state-dtype",
         "dtype-doctor check"),
    ],
)  # fmt: skip
def test_symptoms_get_their_family_with_lower_confidence_and_a_command_to_confirm(text, code, confirm):
    f = explain(text).findings[0]
    assert f.code == code
    assert 0 < f.confidence < 0.5
    assert confirm in f.fixes[0].snippet
    assert "confirm it first" in f.message


def test_unknown_only_without_any_dtype_evidence():
    f = explain("ModuleNotFoundError: No module named 'yaml'").findings[0]
    assert f.code == "unknown"
    assert explain("the model gives a dtype error when I load it").codes() != ["unknown"]


def test_a_path_given_as_text_is_read_as_a_file(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_bytes(("step 1\n" + HALF_FLOAT + "\n").encode("utf-16"))  # PowerShell `> train.log`
    assert main(["explain", str(log), "--json"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["meta"]["text_read_as_file"] == str(log)
    assert data["findings"][0]["code"] == "scalar-type-mismatch"
    assert data["findings"][0]["evidence"][0] == {"text": HALF_FLOAT, "line": 2, "source": str(log)}
    assert f"reading the file {log}" in " ".join(out.err.split())  # folded to the width at spaces only
