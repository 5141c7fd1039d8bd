"""inputs.py: one spec type and parser, real or meta tensors, for check, compare, numerics and the CLI."""

from __future__ import annotations

import pytest
import torch

from dtype_doctor.errors import DoctorError
from dtype_doctor.inputs import TensorSpec, as_spec, is_spec_tuple, meta_inputs, real_inputs, split_inputs


def test_a_spec_pair_is_told_from_a_pair_of_real_strings():
    assert is_spec_tuple(("2x4x64x64", "float32"))
    assert is_spec_tuple(("2xx4", "float32"))  # a spec, badly written: it must fail, not pass as text
    assert not is_spec_tuple(("a cat", "a dog"))
    assert not is_spec_tuple(("2x4", "float32", "x"))
    with pytest.raises(DoctorError, match="cannot parse shape '2xx4'"):
        as_spec(("2xx4", "float32"))
    with pytest.raises(DoctorError, match="unknown dtype 'float99'"):
        as_spec("4x8:float99")
    assert as_spec("ids=1x16:int64") == TensorSpec((1, 16), "int64", "ids")
    assert as_spec("a cat") is None


def test_real_inputs_accept_every_form_and_leave_the_rng_alone():
    before = torch.random.get_rng_state()
    args, kwargs = real_inputs(
        (["2x3", ("2x3", "float16")], {"prompt": "a cat", "t": torch.ones(1)}), "cpu", 0
    )
    assert [a.dtype for a in args] == [torch.float32, torch.float16]
    assert kwargs["prompt"] == "a cat" and kwargs["t"].tolist() == [1.0]
    assert torch.equal(torch.random.get_rng_state(), before)
    strings, _ = real_inputs(("a cat", "a dog"), "cpu", 0)
    assert strings == ("a cat", "a dog")  # not a spec: two positional inputs, passed as given
    again, _ = real_inputs(["2x3"], "cpu", 0)
    assert torch.equal(again[0], args[0])  # seeded


def test_meta_inputs_keep_integers_real_and_masks_full():
    value = meta_inputs({"x": "2x4:float16", "attention_mask": "1x5:int64", "ids": torch.tensor([[3, 4]])})
    assert value["x"].is_meta and value["x"].dtype == torch.float16
    assert value["attention_mask"].tolist() == [[1, 1, 1, 1, 1]]
    assert value["ids"].tolist() == [[3, 4]] and not value["ids"].is_meta


def test_cli_specs_split_into_positional_and_named():
    args, kwargs = split_inputs(["2x3", "mask=2x3:bool"])
    assert args == [TensorSpec((2, 3), "float32")] and kwargs == {"mask": TensorSpec((2, 3), "bool", "mask")}
    with pytest.raises(DoctorError, match="positional input '4' after named inputs"):
        split_inputs(["a=2", "4"])


def test_dtype_naming_parsing_and_validation_have_one_home():
    import torch

    from dtype_doctor import dtypes, inputs
    from dtype_doctor.repair import policy

    assert policy.dtype_name is dtypes.dtype_name and policy.to_torch_dtype is dtypes.to_torch_dtype
    assert inputs.parse_dtype is dtypes.parse_dtype
    assert dtypes.dtype_name(torch.bfloat16) == "bfloat16"
    assert dtypes.to_torch_dtype("fp16") is torch.float16 and dtypes.parse_dtype("half") == "float16"
    with pytest.raises(DoctorError, match="unknown dtype 'fp17'"):
        dtypes.to_torch_dtype("fp17")
