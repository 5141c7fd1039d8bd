"""Lightning Trainer with DtypeDoctorCallback: a real Trainer, a tiny LightningModule, 3 steps on CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning", reason="lightning is not installed (extra: lightning)")

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from dtype_doctor.integrations.lightning import DtypeDoctorCallback  # noqa: E402
from dtype_doctor.sections import DtypeMap  # noqa: E402


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 8), nn.ReLU())
        self.head = nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.head(self.encoder(x)).float(), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(callback, model, data, steps=3):
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(model, DataLoader(data, batch_size=4))
    return trainer


@pytest.fixture
def fit_bf16():
    """Fits a bf16 Regressor for 3 steps on data of the dtype given (float32: the planted mismatch)."""

    def fit(callback, data_dtype):
        torch.manual_seed(0)
        model = Regressor().to(torch.bfloat16)  # the model in bf16, the data loader's floats not
        return _fit(callback, model, TensorDataset(torch.randn(12, 6, dtype=data_dtype), torch.randn(12, 1)))

    return fit


@pytest.fixture
def fit_half():
    """Fits a `.half()` LightningModule of the class given for 2 steps on float16 data (times `scale`)."""

    def fit(module_class, callback, scale=1.0):
        torch.manual_seed(0)
        model = module_class().half()
        data = TensorDataset(torch.randn(8, 6, dtype=torch.float16) * scale, torch.randn(8, 1))
        return _fit(callback, model, data, steps=2)

    return fit


def test_lightning_logs_the_planted_mismatch_in_fix_mode(tmp_path, fit_bf16):
    html = tmp_path / "train.html"
    callback = DtypeDoctorCallback(mode="fix", html_path=html, summary=False)
    trainer = fit_bf16(callback, torch.float32)
    assert trainer.global_step == 3
    metrics = trainer.callback_metrics
    assert metrics["dtype_doctor/errors"] >= 1 and metrics["dtype_doctor/matmul-dtype-mismatch"] >= 1
    (finding,) = [f for f in callback.report.findings if f.code == "matmul-dtype-mismatch"]
    assert finding.location.module == "encoder.0"
    assert {(o.role, o.dtype) for o in finding.operands} >= {("input", "float32"), ("weight", "bfloat16")}
    page = html.read_text()
    assert "matmul-dtype-mismatch" in page and "Module tree by dtype" in page
    entry = callback.report.section(DtypeMap).by_path()["encoder.0"]
    assert (entry.type, entry.dtypes) == ("Linear", {"bfloat16": 2})


def test_lightning_failure_keeps_the_error_and_adds_the_diagnosis(capsys, fit_bf16):
    callback = DtypeDoctorCallback(mode="observe")
    with pytest.raises(RuntimeError, match="mat1 and mat2 must have the same dtype") as info:
        fit_bf16(callback, torch.float32)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "matmul-dtype-mismatch" in notes and "encoder.0" in notes
    err = " ".join(capsys.readouterr().err.split())  # the summary printed on the way out
    # the note carries the diagnosis to the same stream: the summary names it once, not as a panel
    assert "1. ERROR matmul-dtype-mismatch at F.linear in 'encoder.0' (Linear)" in err
    assert "in the exception's note" in err and "Matrix multiply operands have different dtypes" not in err
    assert not callback._loop.active


def test_lightning_clean_run_logs_zero(fit_bf16):
    callback = DtypeDoctorCallback(summary=False)
    trainer = fit_bf16(callback, torch.bfloat16)
    assert trainer.callback_metrics["dtype_doctor/findings"] == 0
    assert callback.report.findings == []


class Overflowing(Regressor):
    def training_step(self, batch, batch_idx):
        x, y = batch
        hidden = self.encoder(x) * 3e4  # past float16's 65504
        return nn.functional.mse_loss(self.head(hidden).float(), y)


def test_lightning_numerics_logs_the_fp16_overflow(fit_half):
    callback = DtypeDoctorCallback(numerics=True, summary=False)
    trainer = fit_half(Overflowing, callback, scale=100)
    assert trainer.callback_metrics["dtype_doctor/fp16-overflow"] >= 1
    assert any(f.code == "fp16-overflow" and f.location.module == "head" for f in callback.report.findings)


def test_lightning_note_leads_with_the_fix_the_replay_verified(fit_bf16):
    """Issue 32: the note was written when the op raised, before the fixes were replayed, and led
    with a fix the replay never passed; it is rewritten with the report's verified ranking."""
    callback = DtypeDoctorCallback(mode="observe", summary=False)
    with pytest.raises(RuntimeError, match="mat1 and mat2") as info:
        fit_bf16(callback, torch.float32)
    (finding,) = [f for f in callback.report.findings if f.code == "matmul-dtype-mismatch"]
    first = finding.fixes[0]
    assert first.verified is True and first.verification.startswith("verified: passes")
    (note,) = [n for n in info.value.__notes__ if n.startswith("dtype-doctor [matmul-dtype-mismatch]")]
    fixes = [line.strip()[len("fix: ") :] for line in note.splitlines() if line.strip().startswith("fix: ")]
    assert fixes[0].startswith(first.title) and f"({first.verification})" in note


class HalfAdamW(Regressor):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.head(self.encoder(x)).float(), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def test_lightning_sees_fp16_parameters_trained_without_master_weights(fit_half):
    """Issue 32: `.half()` + AdamW runs without a dtype mismatch anywhere, and the callback said 0
    findings; the optimizer's first step is where it shows."""
    callback = DtypeDoctorCallback(summary=False)
    trainer = fit_half(HalfAdamW, callback)
    assert trainer.callback_metrics["dtype_doctor/optimizer-state-dtype"] == 1  # once per optimizer
    (finding,) = [f for f in callback.report.findings if f.code == "optimizer-state-dtype"]
    assert finding.message.startswith("AdamW updates 4 of 4 parameters in float16 (encoder.0.weight")
    assert finding.location.op == "AdamW.step"
    assert finding.fixes[0].snippet.startswith("model = model.to(torch.float32)")
