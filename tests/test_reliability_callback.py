"""A training-loop callback whose report file cannot be written warns; it never fails finished training."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from dtype_doctor.integrations.transformers import DtypeDoctorCallback  # noqa: E402
from test_integrations_transformers import _trainer  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    yield
    # the Trainer initialised accelerate's process-wide state; later tests build their own Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


def test_trainer_finishes_when_the_report_cannot_be_written(tmp_path, caplog):
    blocked = tmp_path / "a-directory"
    blocked.mkdir()
    # json_path is a directory, html_path lies under a file: neither can be written
    (tmp_path / "file").write_text("")
    callback = DtypeDoctorCallback(
        mode="fix", json_path=blocked, html_path=tmp_path / "file" / "r.html", summary=False
    )
    trainer = _trainer(tmp_path, callback, torch.float32)
    with pytest.warns(RuntimeWarning, match="cannot write the report") as caught:
        result = trainer.train()
    assert result.global_step == 3
    messages = [str(w.message) for w in caught if "cannot write" in str(w.message)]
    assert any(str(blocked) in m for m in messages) and any("r.html" in m for m in messages)
    assert "cannot write the report" in caplog.text  # also in the training log
    assert "norm-dtype-mismatch" in callback.report.codes()  # the result is kept in memory
