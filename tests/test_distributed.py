"""torch.distributed: per-rank reports under real torchrun (2 CPU processes, gloo), the rank-0 merge,
and the FSDP / DeepSpeed precision audits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from dtype_doctor.cli import main  # noqa: E402
from dtype_doctor.errors import DoctorError  # noqa: E402
from dtype_doctor.integrations.distributed import (  # noqa: E402
    RankInfo,
    audit_deepspeed_config,
    audit_fsdp_policy,
    rank_info,
    rank_report_path,
    tag_report,
)
from dtype_doctor.report import Report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).parent / "data" / "ddp_ranks.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One torchrun launch of tests/data/ddp_ranks.py (its three scenarios), shared by the tests."""
    out = tmp_path_factory.mktemp("ranks")
    return _torchrun(out), out


def _torchrun(out: Path, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    """torchrun --nproc-per-node 2 SCRIPT OUT (CPU, gloo), killed with its workers if it hangs."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip(f"torchrun not found next to {sys.executable}")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.Popen(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", str(script), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=out,
        start_new_session=True,  # so that a hang can be ended with the workers, not just torchrun
    )
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"torchrun hung:\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_torchrun_gathers_to_rank0_and_names_the_rank_whose_model_differs(ranks):
    _, out = ranks
    merged = Report.from_json((out / "dtype_map" / "merged.json").read_text())
    assert merged.meta["ranks"] == [0, 1]
    divergent = [f for f in merged.findings if f.code == "rank-divergence"]
    assert {f.location.module for f in divergent} == {"vision.0"}
    (finding,) = divergent
    assert finding.location.rank == 1
    assert "module 'vision.0' holds bfloat16; rank 0: float32" in finding.message


def test_torchrun_watch_fix_mode_merges_on_rank0(ranks):
    out = ranks[1] / "watch_fix"
    assert (out / "dtype-doctor.rank0.json").exists() and (out / "dtype-doctor.rank1.json").exists()
    merged = Report.from_json((out / "dtype-doctor.json").read_text())
    first = merged.findings[0]
    assert first.code == "rank-divergence" and first.location.rank == 1
    assert first.location.module == "vision.0"
    assert "float32" in {o.dtype for o in first.operands}


def test_torchrun_failing_rank_reports_then_merge_command(ranks, capsys):
    done, out = ranks
    out = out / "watch_error"
    assert done.returncode != 0  # rank 1's RuntimeError ends the run, as without the tool
    assert "mat1 and mat2 must have the same dtype" in done.stderr
    merged_path = out / "dtype-doctor.json"
    if merged_path.exists():  # rank 0 merged before torchrun stopped it (rank 1 published first)
        merged_now = Report.from_json(merged_path.read_text())
        assert any(f.location.rank == 1 for f in merged_now.findings if f.location)
    rank1 = Report.from_json((out / "dtype-doctor.rank1.json").read_text())
    assert rank1.findings and all(f.location.rank == 1 for f in rank1.findings)
    code = main(["merge", str(out / "dtype-doctor.rank*.json"), "--json"])
    assert code == 1
    merged = json.loads(capsys.readouterr().out)
    first = merged["findings"][0]
    assert first["code"] == "rank-divergence" and first["location"]["rank"] == 1
    assert first["location"]["module"] == "vision.0"


def test_rank_info_from_torchrun_env(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rank_info() == RankInfo(3, 4, 1)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert rank_info() is None


def test_rank_report_path_and_tagging():
    assert rank_report_path("out/report.json", 1) == Path("out/report.rank1.json")
    assert rank_report_path("r-{rank}.json", 2) == Path("r-2.json")
    report = tag_report(Report(tool="run"), RankInfo(1, 2))
    assert report.meta["rank"] == 1 and report.meta["world_size"] == 2


# ------------------------------------------------------------------ FSDP MixedPrecision


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    model.register_buffer("inv_freq", torch.ones(2))
    return model


def test_fsdp_fp32_model_with_sound_policy_has_no_findings():
    from torch.distributed.fsdp import MixedPrecision

    policy = MixedPrecision(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16
    )
    assert audit_fsdp_policy(_model(), policy).findings == []


def test_fsdp_half_model_under_bf16_policy():
    from torch.distributed.fsdp import MixedPrecision

    report = audit_fsdp_policy(_model().half(), MixedPrecision(param_dtype=torch.bfloat16))
    messages = " | ".join(f.message for f in report.findings)
    assert set(report.codes()) == {"fsdp-policy-mismatch"}
    assert "The model is already float16 and param_dtype is bfloat16" in messages
    assert "buffer_dtype is unset" in messages and "'inv_freq'" in messages
    assert any("torch.float32" in fix.snippet for f in report.findings for fix in f.fixes)


def test_fsdp_mixed_parameter_dtypes_is_an_error_naming_the_module():
    from torch.distributed.fsdp import MixedPrecision

    model = _model()
    model[1].half()
    report = audit_fsdp_policy(model, MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float16))
    errors = report.errors
    assert errors and errors[0].location.module == "1"
    assert "'1.weight'" in errors[0].message and "uniform dtype" in errors[0].message
    assert any("gradients are reduced in float16" in f.message for f in report.findings)


def test_fsdp2_policy_dict_reduce_in_fp16():
    report = audit_fsdp_policy(_model(), {"param_dtype": torch.bfloat16, "reduce_dtype": "torch.float16"})
    assert any("reduce_dtype is float16 while compute runs in bfloat16" in f.message for f in report.findings)


# ------------------------------------------------------------------ DeepSpeed config


def test_deepspeed_both_fp16_and_bf16_is_an_error(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"fp16": {"enabled": True}, "bf16": {"enabled": True}}))
    report = audit_deepspeed_config(None, path)
    (finding,) = report.errors
    assert (
        finding.code == "deepspeed-config-conflict" and "cannot be simultaneously enabled" in finding.message
    )
    assert finding.evidence[0].source == str(path)


def test_deepspeed_half_model_with_bf16_config():
    report = audit_deepspeed_config(_model().half(), {"bf16": {"enabled": True}})
    (finding,) = report.findings
    assert "The model is float16 but the config enables bf16" in finding.message
    assert "casts the module to bfloat16" in finding.message
    assert any("engine.module" in fix.snippet for fix in finding.fixes)


def test_deepspeed_half_model_without_precision_section_and_apex_amp():
    report = audit_deepspeed_config(_model().half(), '{"amp": {"enabled": true, "opt_level": "O1"}}')
    assert any("NVIDIA apex" in f.message for f in report.findings)
    report = audit_deepspeed_config(_model().half(), {"zero_optimization": {"stage": 2}})
    assert any("enables neither fp16 nor bf16" in f.message for f in report.findings)


def test_deepspeed_consistent_and_auto_configs_are_quiet():
    assert audit_deepspeed_config(_model(), {"fp16": {"enabled": True}}).findings == []
    auto = audit_deepspeed_config(_model().half(), {"bf16": {"enabled": "auto"}})
    assert auto.findings == [] and auto.meta["auto_sections"] == ["bf16"]


def test_deepspeed_autocast_of_the_other_low_precision():
    cfg = {"fp16": {"enabled": True}, "torch_autocast": {"enabled": True, "dtype": "bfloat16"}}
    report = audit_deepspeed_config(_model(), cfg)
    assert report.errors and "torch_autocast runs ops in bfloat16" in report.errors[0].message


def test_deepspeed_bad_config_is_a_doctor_error(tmp_path):
    with pytest.raises(DoctorError, match="cannot read DeepSpeed config"):
        audit_deepspeed_config(None, tmp_path / "missing.json")
    with pytest.raises(DoctorError, match="not valid JSON"):
        audit_deepspeed_config(None, "{oops")


def test_fsdp_without_policy_says_so():
    report = audit_fsdp_policy(_model().half())
    assert report.findings == [] and "no MixedPrecision policy" in report.meta["note"]
