"""NumericsMonitor's gradient hooks (a mixin: it shares the monitor's state): a stats row for each
floating gradient reaching a module output or a parameter, and float16/bfloat16 `.grad`
accumulation handed to the op-level checks."""

from __future__ import annotations

from typing import Any

import torch

from .analysis import Grad, TensorInfo
from .frame import short_dtype_name
from .stats import light_stats

_LOW = (torch.float16, torch.bfloat16)


class Gradients:
    """The monitor's backward side; `_grads` collects one `Grad` per measured gradient."""

    _active: bool
    _busy: bool
    _full: bool
    _grads: list
    _infos: list
    _low_precision_step: bool
    _opwatch: Any
    _rows: Any
    _token: object

    def _on_grad(self, token: object, of_slot: int, grad: torch.Tensor) -> None:
        if token is not self._token or not self._active or self._busy:
            return  # a backward of a step already analysed
        try:
            if isinstance(grad, torch.Tensor) and grad.is_floating_point() and grad.numel():
                self._grads.append(Grad(self._measure_grad(grad), of_slot=of_slot))
        except Exception as exc:
            self._fail(exc)

    def _on_param_grad(self, name: str, param_ref: Any, grad: torch.Tensor) -> None:
        if not self._active or self._busy:
            return
        if self._opwatch is not None:
            param = param_ref()
            if param is not None and param.grad is not None and param.grad.dtype in _LOW:
                try:  # gradient accumulation into a float16/bfloat16 .grad
                    self._opwatch.accumulation(param, grad)
                except Exception as exc:
                    self._op_error(exc)
        if not self._rows:
            return
        # Reading every weight gradient costs about one optimizer step. Only a step that ran
        # float16/bfloat16 compute (half model or autocast) can overflow one without its module's
        # input or output gradient (measured anyway) already being huge, so only such steps pay.
        if not self._low_precision_step and grad.dtype not in _LOW:
            return
        try:
            if grad.is_floating_point() and grad.numel():
                # a parameter gradient is as big as the parameter: in float32/bfloat16 only its
                # range matters (underflow is a float16 matter), so one fused pass is enough
                light = grad.dtype != torch.float16
                self._grads.append(Grad(self._measure_grad(grad, light), param=name))
        except Exception as exc:
            self._fail(exc)

    def _measure_grad(self, grad: torch.Tensor, light: bool = False) -> int:
        if not self._full:
            slot = self._rows.add_range(grad)
        else:  # a full step: a light row (one fused pass) for a big float32/bfloat16 weight gradient
            slot = self._rows.add_row(light_stats(grad)) if light else self._rows.add(grad)
        self._infos.append(TensorInfo(short_dtype_name(grad.dtype), grad.shape, grad.numel()))
        return slot
