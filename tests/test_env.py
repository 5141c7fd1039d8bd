"""env: facts about this machine, and planted packages reported as the user would see them.

The planted packages live in a tmp dir put first on PYTHONPATH of a real `dtype-doctor env`
subprocess: NVIDIA apex (apex/normalization/fused_layer_norm.py with FusedLayerNorm and
FusedRMSNorm), the unrelated PyPI `apex` (fails to import on `from pyramid.session import ...`),
OneFlow with __version__, OneDiff, an xformers built for another torch, and an accelerate config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from dtype_doctor.env.facts import environment
from dtype_doctor.env.packages import apex_info, package_info
from dtype_doctor.sections import EnvFacts

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _env(data: dict) -> dict:
    """The env facts section of a JSON report."""
    return next(s for s in data["sections"] if s["type"] == "env")


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


NVIDIA_APEX = {
    "apex/__init__.py": "from . import normalization\n",
    "apex/normalization/__init__.py": "from .fused_layer_norm import FusedLayerNorm, FusedRMSNorm\n",
    "apex/normalization/fused_layer_norm.py": """
        import torch

        class FusedLayerNorm(torch.nn.Module):
            pass

        class FusedRMSNorm(torch.nn.Module):
            pass
        """,
    "apex/amp/__init__.py": "",
    # a library that swaps apex's fused norm in when it imports (the xDiT / old-T5 pattern)
    "xfuser/__init__.py": "",
    "xfuser/model/norm.py": """
        try:
            from apex.normalization import FusedRMSNorm as RMSNorm
        except ImportError:
            RMSNorm = None
        """,
}
PYPI_APEX = {
    "apex/__init__.py": "from pyramid.session import UnencryptedCookieSessionFactoryConfig\n",
    "apex/views.py": "",
}
ONEFLOW = {
    "oneflow/__init__.py": '__version__ = "0.9.1.dev20240101+cu118"\n',
    "onediff/__init__.py": "from ._version import __version__\n",
    "onediff/_version.py": '__version__ = "1.2.0"\n',
}
XFORMERS_FOR_OTHER_TORCH = {
    "xformers/__init__.py": "",
    "xformers-0.0.99.dist-info/METADATA": """\
        Metadata-Version: 2.1
        Name: xformers
        Version: 0.0.99
        Requires-Dist: torch==2.0.1
        Requires-Dist: numpy
        """,
}


def run_env(pythonpath: Path | None, hf_home: Path, extra_env: dict[str, str] | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "PYTHONPATH"))}
    env["PYTHONPATH"] = os.pathsep.join([*([str(pythonpath)] if pythonpath else []), SRC])
    env["HF_HOME"] = str(hf_home)
    env.update(extra_env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "dtype_doctor", "env", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def codes(data: dict) -> list[str]:
    return [f["code"] for f in data["findings"]]


def finding(data: dict, code: str) -> dict:
    return next(f for f in data["findings"] if f["code"] == code)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The test process itself: nothing planted, no accelerate config, env through the CLI."""
    from dtype_doctor.cli import main

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf_clean")))
        mp.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
        out = tmp_path_factory.mktemp("out") / "env.json"
        rc = main(["env", "--json", str(out), "--no-color"])
        return rc, json.loads(out.read_text())


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = write(tmp_path_factory.mktemp("planted"), {**NVIDIA_APEX, **ONEFLOW, **XFORMERS_FOR_OTHER_TORCH})
    hf = write(
        tmp_path_factory.mktemp("hf"),
        {"accelerate/default_config.yaml": "compute_environment: LOCAL_MACHINE\nmixed_precision: fp16\n"},
    )
    return run_env(root, hf, {"ACCELERATE_MIXED_PRECISION": "bf16"})


@pytest.fixture(scope="module")
def pypi_apex(tmp_path_factory):
    root = write(tmp_path_factory.mktemp("pypi"), PYPI_APEX)
    return run_env(root, tmp_path_factory.mktemp("hf_empty"))


# ---------------------------------------------------------------------------------------------
# a clean environment


def test_clean_environment_reports_facts_and_no_library_hazards(clean):
    rc, data = clean
    env = _env(data)
    assert env["software"]["torch"] == torch.__version__
    assert env["software"]["cuda"] == (torch.version.cuda or "none (CPU build)")
    assert env["cpu"]["fp16_matmul"] is True and env["cpu"]["bf16_matmul"] is True
    assert env["autocast"]["cpu"]["available"] is True
    assert env["autocast"]["cpu"]["default_dtype"] == "bfloat16"
    for lib in ("apex", "oneflow", "onediff", "xformers", "flash_attn"):
        assert env["libraries"][lib]["installed"] is False
    assert env["libraries"]["accelerate"]["installed"] is True
    assert env["libraries"]["accelerate"]["mixed_precision"] is None
    hazards = {"apex-conflict", "pypi-apex-clash", "oneflow-torch-autocast", "accelerate-mixed-precision"}
    assert not hazards & set(codes(data))
    assert rc == (1 if any(f["severity"] != "info" for f in data["findings"]) else 0)


def test_gpu_facts_match_torch(clean):
    _, data = clean
    gpus = _env(data)["gpus"]
    assert len(gpus) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    for g in gpus:
        major, minor = torch.cuda.get_device_capability(g["index"])
        assert g["capability"] == f"{major}.{minor}"
        with torch.cuda.device(g["index"]):
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        assert (g["bf16"] == "native") == native


# ---------------------------------------------------------------------------------------------
# planted packages


def test_nvidia_apex_is_reported_with_the_library_that_swaps_it_in(planted):
    rc, data = planted
    apex = _env(data)["libraries"]["apex"]
    assert apex["installed"] is True and apex["kind"] == "nvidia"
    assert apex["fused_norms"] is True and apex["cuda_ext"] is False
    f = finding(data, "apex-conflict")
    assert f["severity"] == "warning"
    assert "xfuser/model/norm.py" in f["data"]["consumers"]
    assert "xfuser imports apex" in f["message"]
    assert f["evidence"][0]["text"] == "xfuser/model/norm.py imports apex"
    assert f["fixes"][0]["snippet"] == "pip uninstall -y apex"
    assert "apex-no-cuda-ext" in codes(data)
    assert rc == 1


def test_oneflow_and_onediff_are_reported_with_versions(planted):
    _, data = planted
    libs = _env(data)["libraries"]
    assert libs["oneflow"]["installed"] and libs["oneflow"]["version"] == "0.9.1.dev20240101+cu118"
    assert libs["onediff"]["installed"] and libs["onediff"]["version"] == "1.2.0"
    f = finding(data, "oneflow-torch-autocast")
    assert "oneflow 0.9.1.dev20240101+cu118" in f["message"] and "onediff 1.2.0" in f["message"]
    assert any("oneflow.autocast" in fix["snippet"] for fix in f["fixes"])
    assert "oneflow-infer-dtype" in f["related"]


def test_extension_built_for_another_torch(planted):
    _, data = planted
    f = finding(data, "extension-torch-mismatch")
    assert f["data"] == {"package": "xformers", "pin": "2.0.1"}
    assert f"torch {torch.__version__}" in f["message"]
    assert _env(data)["libraries"]["xformers"]["version"] == "0.0.99"


def test_accelerate_mixed_precision_from_config_file_and_environment(planted):
    _, data = planted
    found = {
        f["data"]["source"].rsplit("/", 1)[-1]: f["data"]["mixed_precision"]
        for f in data["findings"]
        if f["code"] == "accelerate-mixed-precision"
    }
    assert found == {"ACCELERATE_MIXED_PRECISION": "bf16", "default_config.yaml": "fp16"}
    assert _env(data)["software"]["env_vars"]["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_pypi_apex_is_named_as_the_wrong_package(pypi_apex):
    rc, data = pypi_apex
    apex = _env(data)["libraries"]["apex"]
    assert apex["kind"] == "pypi"
    assert "pyramid" in apex["import_error"]
    f = finding(data, "pypi-apex-clash")
    assert f["severity"] == "error"
    assert "pyramid" in f["message"] and "not NVIDIA apex" in f["message"]
    assert f["fixes"][0]["snippet"] == "pip uninstall -y apex"
    assert "apex-conflict" not in codes(data)
    assert rc == 1


# ---------------------------------------------------------------------------------------------
# in process: nothing missing or broken makes env fail


def test_environment_api_and_console(clean, capsys):
    from dtype_doctor.cli import main

    report = environment()
    assert report.tool == "env"
    assert {"software", "gpus", "cpu", "autocast", "libraries"} <= set(vars(report.section(EnvFacts)))
    assert main(["env", "--no-color"]) == clean[0]
    out = capsys.readouterr().out
    assert "libraries that change precision" in out and "apex" in out and "autocast" in out
    assert "torch kernels" in out and torch.__version__ in out


def test_an_apex_that_crashes_on_import_does_not_break_env(tmp_path, monkeypatch):
    write(
        tmp_path,
        {"apex/__init__.py": "raise SystemExit('apex exploded')\n", "apex/normalization/__init__.py": ""},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        info = apex_info()
    finally:
        for name in [m for m in sys.modules if m == "apex" or m.startswith("apex.")]:
            del sys.modules[name]
    assert info["kind"] == "nvidia" and info["import_error"] == "SystemExit: apex exploded"


def test_package_info_does_not_import(tmp_path, monkeypatch):
    write(tmp_path, {"noimport_pkg/__init__.py": 'raise RuntimeError("imported!")\n__version__ = "3.1"\n'})
    monkeypatch.syspath_prepend(str(tmp_path))
    info = package_info("noimport_pkg")
    assert info == {"installed": True, "version": "3.1", "location": str(tmp_path / "noimport_pkg")}
    assert "noimport_pkg" not in sys.modules
    assert package_info("surely_not_installed_pkg_xyz") == {"installed": False, "version": None}


@pytest.mark.parametrize(
    ("init", "said"),
    [
        ("import time\ntime.sleep(3600)\n", "did not finish"),  # an apex that hangs at import
        ("import os\nos._exit(0)\n", "ended the process"),  # one that ends the process
    ],
)
def test_an_apex_that_hangs_or_exits_at_import_does_not_take_env_with_it(tmp_path, monkeypatch, init, said):
    """Issue 22 item 21: the import is probed in a child process with a timeout."""
    root = write(tmp_path / "site", {"apex/__init__.py": init, "apex/amp/__init__.py": ""})
    monkeypatch.setattr("dtype_doctor.env.packages.APEX_PROBE_TIMEOUT", 5.0)
    monkeypatch.syspath_prepend(str(root))
    info = apex_info()
    assert info["installed"] and said in info["import_error"]
    code, data = run_env(root, tmp_path / "hf", {"DTYPE_DOCTOR_APEX_PROBE_TIMEOUT": "5"})
    assert code in (0, 1) and said in json.dumps(data)
