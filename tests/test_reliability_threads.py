"""issue 13, item 6: watch() and threads. Mismatches in worker threads are reported, two threads
each inside their own watch() get their own module names, and sessions exited out of order
leave GradScaler as they found it."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from dtype_doctor import watch
from dtype_doctor.numerics import ScalerMonitor

ORIGINAL_UNSCALE = torch.amp.GradScaler.unscale_
ORIGINAL_UPDATE = torch.amp.GradScaler.update


def test_a_mismatch_in_a_worker_thread_is_reported():
    model = nn.Sequential(nn.Linear(4, 4)).half()
    errors: list[str] = []

    def work() -> None:
        try:
            model(torch.randn(2, 4))
        except RuntimeError as exc:
            errors.append(str(exc))

    with watch(model=model) as session:
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
    # the user's error in the worker is untouched...
    assert errors and errors[0].startswith("mat1 and mat2 must have the same dtype")
    # ...and (before: nothing, the function mode is per thread) it is named and located
    found = [f for f in session.report.findings if f.code == "matmul-dtype-mismatch"]
    assert found and found[0].location.module == "0"
    assert "input float32, weight float16" in found[0].message


class Waiting(nn.Module):
    """A layer that waits for an event mid-forward, so the other thread runs in between, then
    computes itself (no child module: the innermost module on the stack is this one)."""

    def __init__(self, wait: threading.Event, then: threading.Event | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.wait, self.then = wait, then

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.then is not None:
            self.then.set()
        assert self.wait.wait(10)
        return torch.nn.functional.linear(x, self.weight)


def test_two_threads_each_inside_watch_get_their_own_module_names():
    b_entered, a_entered, b_done = threading.Event(), threading.Event(), threading.Event()
    a_failed = threading.Event()
    model_a = nn.Sequential()
    model_a.add_module("a_layer", Waiting(b_done, a_entered))
    model_b = nn.Sequential()
    model_b.add_module("b_layer", Waiting(a_entered, b_entered))
    model_b.half()
    sessions: dict[str, object] = {}
    failures: list[BaseException] = []

    def run_a() -> None:
        assert b_entered.wait(10)  # b_layer is running: a_layer is entered on top of it
        with watch(model=model_a) as s:
            sessions["a"] = s
            try:
                model_a(torch.randn(2, 4))
            except BaseException:
                a_failed.set()
                raise

    def run_b() -> None:
        with watch(model=model_b) as s:
            sessions["b"] = s
            try:
                model_b(torch.randn(2, 4))  # float32 input into a float16 layer
            except RuntimeError as exc:
                failures.append(exc)
        b_done.set()

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(failures) == 1 and "same dtype" in str(failures[0]), "b's own error reached b"
    assert "a" in sessions and not a_failed.is_set(), "a ran to the end"
    found = [f for f in sessions["b"].report.findings if f.code == "matmul-dtype-mismatch"]
    # before: one module stack for every thread, so b's mismatch was placed in 'a_layer'
    assert [f.location.module for f in found] == ["b_layer"]
    assert not [f for f in sessions["a"].report.findings if f.severity.value == "error"]


def test_sessions_exited_out_of_order_restore_grad_scaler():
    first, second = watch(), watch()
    first.__enter__()
    second.__enter__()
    assert torch.amp.GradScaler.unscale_ is not ORIGINAL_UNSCALE
    first.__exit__(None, None, None)
    assert torch.amp.GradScaler.unscale_ is not ORIGINAL_UNSCALE, "second is still active"
    second.__exit__(None, None, None)
    # before: second restored first's wrapper, which stayed on the class for good
    assert torch.amp.GradScaler.unscale_ is ORIGINAL_UNSCALE


def test_the_second_session_still_sees_fp16_gradients_after_the_first_left():
    model = nn.Linear(4, 4).half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    first, second = watch(model=model), watch(model=model)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    scaler.scale(model(torch.randn(2, 4, dtype=torch.float16)).float().sum()).backward()
    with pytest.raises(ValueError, match="unscale FP16 gradients"):
        scaler.unscale_(optimizer)
    second.__exit__(None, None, None)
    assert [f.code for f in second.report.findings] == ["fp16-gradient-unscale"]
    assert not first.report.findings


def test_scaler_monitors_stopped_out_of_order_restore_update():
    first, second = ScalerMonitor().start(), ScalerMonitor().start()
    first.stop()
    second.stop()
    assert torch.amp.GradScaler.update is ORIGINAL_UPDATE


def test_a_worker_still_running_when_the_session_ends_runs_as_without_the_tool():
    entered, session_over = threading.Event(), threading.Event()
    model = nn.Sequential()
    model.add_module("layer", Waiting(session_over, entered))
    model.half()
    errors: list[str] = []

    def work() -> None:
        try:
            model(torch.randn(2, 4))  # the mismatch happens after the session has ended
        except RuntimeError as exc:
            errors.append(str(exc))

    worker = threading.Thread(target=work)
    with watch(model=model) as session:
        worker.start()
        assert entered.wait(10)
    session_over.set()
    worker.join(10)
    assert errors == ["expected m1 and m2 to have the same dtype, but got: float != c10::Half"]
    assert not session.report.findings
