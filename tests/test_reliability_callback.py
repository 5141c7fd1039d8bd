"""A training-loop callback whose report file cannot be written warns; it never fails finished training."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from dtype_doctor.integrations.transformers import DtypeDoctorCallback  # noqa: E402


def _trainer(tmp_path, callback):
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8, bos_token_id=0, eos_token_id=0
    )
    model = transformers.GPT2LMHeadModel(config).to(torch.bfloat16)
    data = [
        {"inputs_embeds": torch.randn(4, 16, dtype=torch.float32), "labels": torch.randint(0, 32, (4,))}
        for _ in range(2)
    ]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=2,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    return transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])


def test_trainer_finishes_when_the_report_cannot_be_written(tmp_path, caplog):
    blocked = tmp_path / "a-directory"
    blocked.mkdir()
    # json_path is a directory, html_path lies under a file: neither can be written
    (tmp_path / "file").write_text("")
    callback = DtypeDoctorCallback(
        mode="fix", json_path=blocked, html_path=tmp_path / "file" / "r.html", summary=False
    )
    trainer = _trainer(tmp_path, callback)
    with pytest.warns(RuntimeWarning, match="cannot write the report") as caught:
        result = trainer.train()
    assert result.global_step == 1
    messages = [str(w.message) for w in caught if "cannot write" in str(w.message)]
    assert any(str(blocked) in m for m in messages) and any("r.html" in m for m in messages)
    assert "cannot write the report" in caplog.text  # also in the training log
    assert "norm-dtype-mismatch" in callback.report.codes()  # the result is kept in memory
