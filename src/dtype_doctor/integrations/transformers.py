"""transformers: a TrainerCallback that runs the training under `watch` and logs what it finds.

    from dtype_doctor.integrations.transformers import DtypeDoctorCallback
    trainer = Trainer(..., callbacks=[DtypeDoctorCallback(mode="observe", numerics=False)])

Each log step gets `dtype_doctor/findings`, `dtype_doctor/errors` and one count per family code
(in `logs` for the callbacks after this one, and in `trainer.state.log_history`); new findings are
logged once as warnings; at train end the report is printed and optionally written as JSON/HTML.
If training raises, the Trainer calls no callback: the report is in `callback.report`, and
`callback.close()` ends the watch.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from ..report import Report
from .loop import LoopCallback

__all__ = ["DtypeDoctorCallback"]


class DtypeDoctorCallback(LoopCallback, TrainerCallback):
    def close(self) -> Report:
        return self._loop.stop()

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self._loop.start(model)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not self._loop.active:
            return
        numbers = self._loop.metrics()
        if logs is not None:
            logs.update(numbers)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(numbers)
        self._loop.announce_new()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._loop.active and state.log_history is not None:
            # the final counts join the last entry (the Trainer's summary with train_loss): an entry
            # of our own after it would make log_history[-1] no longer the summary
            if state.log_history:
                state.log_history[-1].update(self._loop.metrics())
            else:
                state.log_history.append({**self._loop.metrics(), "step": state.global_step})
        self._loop.stop()
