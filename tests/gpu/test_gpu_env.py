"""env on a real GPU: the device, its capability and what it supports are read from it."""

from __future__ import annotations

import json

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (tests/gpu runs on a GPU machine)", allow_module_level=True)

from dtype_doctor.cli import main
from dtype_doctor.env.facts import environment


def gpus_in(report_json: dict) -> list[dict]:
    """The GPU facts of a report's JSON: its "env" section."""
    return next(s["gpus"] for s in report_json["sections"] if s.get("type") == "env")


def test_env_reports_the_visible_gpus_as_torch_sees_them():
    gpus = gpus_in(json.loads(environment().to_json()))
    assert len(gpus) == torch.cuda.device_count()
    first = gpus[0]
    major, minor = torch.cuda.get_device_capability(0)
    assert first["name"] == torch.cuda.get_device_name(0)
    assert first["capability"] == f"{major}.{minor}" and first["sm"] == major * 10 + minor
    assert first["memory_bytes"] == torch.cuda.get_device_properties(0).total_memory
    assert first["tf32"] == (major >= 8)
    assert (first["bf16"] == "native") == (major >= 8)


def test_env_json_on_the_command_line(capsys):
    code = main(["env", "--json"])
    assert code in (0, 1)
    gpus = gpus_in(json.loads(capsys.readouterr().out))
    assert gpus and gpus[0]["name"] == torch.cuda.get_device_name(0)
