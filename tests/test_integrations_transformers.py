"""transformers Trainer with DtypeDoctorCallback: a real Trainer, a tiny GPT-2, 3 steps on CPU."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from dtype_doctor.integrations.transformers import DtypeDoctorCallback  # noqa: E402


def _trainer(tmp_path, callback, embeds_dtype, model_dtype=torch.bfloat16):
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0
    )
    # the InternLM-XComposer shape: model loaded in low precision, embeddings fed in float32
    model = transformers.GPT2LMHeadModel(config).to(model_dtype)
    data = [
        {"inputs_embeds": torch.randn(8, 32, dtype=embeds_dtype), "labels": torch.randint(0, 64, (8,))}
        for _ in range(6)
    ]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=2,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    return transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])


def test_trainer_logs_the_planted_mismatch(tmp_path, capsys):
    json_path = tmp_path / "dd.json"
    callback = DtypeDoctorCallback(mode="fix", json_path=json_path)
    trainer = _trainer(tmp_path, callback, torch.float32)
    trainer.train()
    assert trainer.state.global_step == 3
    step_logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(step_logs) == 3
    assert all(h["dtype_doctor/errors"] >= 1 for h in step_logs)
    assert step_logs[0]["dtype_doctor/norm-dtype-mismatch"] >= 1
    # the findings name the module and the operands, in the report written at train end
    written = json.loads(json_path.read_text())
    norm = [f for f in written["findings"] if f["code"] == "norm-dtype-mismatch"]
    assert norm and norm[0]["location"]["module"] == "transformer.h.0.ln_1"
    assert {(o["role"], o["dtype"]) for o in norm[0]["operands"]} >= {
        ("input", "float32"),
        ("weight", "bfloat16"),
    }
    assert "norm-dtype-mismatch" in capsys.readouterr().err  # the console summary at train end


def test_trainer_clean_run_logs_zero_and_leaves_no_watch_behind(tmp_path):
    callback = DtypeDoctorCallback(summary=False)
    # float32: a bfloat16 model stepped by AdamW at 5e-5 loses its updates (rounded_updates says so)
    trainer = _trainer(tmp_path, callback, torch.float32, model_dtype=torch.float32)
    trainer.train()
    step_logs = [h for h in trainer.state.log_history if "loss" in h]
    assert step_logs and all(h["dtype_doctor/findings"] == 0 for h in step_logs)
    assert callback.report.findings == []
    assert not callback._loop.active
    # after train end nothing is watched any more
    from torch.overrides import _get_current_function_mode_stack

    assert not any("Watch" in type(m).__name__ for m in _get_current_function_mode_stack())


def test_log_history_still_ends_with_the_trainers_summary(tmp_path):
    """Issue 22 item 22: no entry of the callback's own after the summary with train_loss."""
    callback = DtypeDoctorCallback(summary=False)
    # float32: a bfloat16 model stepped by AdamW at 5e-5 loses its updates (rounded_updates says so)
    trainer = _trainer(tmp_path, callback, torch.float32, model_dtype=torch.float32)
    trainer.train()
    last = trainer.state.log_history[-1]
    assert "train_loss" in last and "dtype_doctor/findings" in last


def test_trainer_sees_fp16_parameters_trained_without_master_weights(tmp_path):
    """Issue 32: a Trainer on a `.half()` model (AdamW, no fp32 master copy) logged 0 findings every
    step while grad_norm went NaN; the optimizer's step shows it, with audit's family."""
    callback = DtypeDoctorCallback(summary=False)
    trainer = _trainer(tmp_path, callback, torch.float16)
    trainer.model.half()
    trainer.train()
    step_logs = [h for h in trainer.state.log_history if "loss" in h]
    assert step_logs and all(h["dtype_doctor/optimizer-state-dtype"] == 1 for h in step_logs)
    (finding,) = [f for f in callback.report.findings if f.code == "optimizer-state-dtype"]
    assert " parameters in float16 (transformer.wte.weight" in finding.message
    assert "no float32 master copy" in finding.message
