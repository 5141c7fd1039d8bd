"""Lightning: a Callback that runs fitting under `watch` and logs what it finds with `self.log`.

    from dtype_doctor.integrations.lightning import DtypeDoctorCallback
    trainer = L.Trainer(..., callbacks=[DtypeDoctorCallback(mode="observe")])

Every training batch logs `dtype_doctor/findings`, `dtype_doctor/errors` and one count per family
code (in `trainer.callback_metrics` and the loggers); when fitting raises, the error gets watch's
diagnosis in its notes (Lightning's on_exception); at train end the report is printed and
optionally written as JSON/HTML. Works with `lightning` and with the older `pytorch_lightning`.
"""

from __future__ import annotations

from typing import Any

from .loop import LoopCallback

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package name before Lightning 2.0
    from pytorch_lightning import Callback

__all__ = ["DtypeDoctorCallback"]


class DtypeDoctorCallback(LoopCallback, Callback):
    def __init__(self, *args: Any, prog_bar: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prog_bar = prog_bar

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._loop.start(pl_module)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._loop.active:
            return
        for key, value in self._loop.metrics().items():
            pl_module.log(
                key, value, on_step=True, on_epoch=False, prog_bar=self.prog_bar and key.endswith("errors")
            )
        self._loop.announce_new()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._loop.stop()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._loop.stop(exception)
