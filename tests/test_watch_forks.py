"""Issue 22 item 16: silent promotions in DataLoader workers or os.fork children are not dropped
without a word: the report says those processes ran unwatched."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import dtype_doctor as dd  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork start method")


class Promoting(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.ones(2, dtype=torch.float16) * torch.ones(2)  # a silent promotion, in the worker


def test_dataloader_workers_are_said_to_be_unwatched():
    loader = torch.utils.data.DataLoader(
        Promoting(), batch_size=2, num_workers=2, multiprocessing_context="fork"
    )
    with dd.watch() as session:
        batches = [b for b in loader]
    assert len(batches) == 2 and batches[0].dtype == torch.float32  # the program ran as it would
    notes = [f for f in session.report.findings if f.code == "child-process-unwatched"]
    assert len(notes) == 1 and notes[0].data["forks"] >= 2
    assert "ran unwatched" in notes[0].message


def test_an_os_fork_child_is_counted_and_runs_unwatched():
    with dd.watch() as session:
        pid = os.fork()
        if pid == 0:  # the child: it runs the op as it would without the tool, then leaves
            try:
                ok = (torch.ones(2, dtype=torch.float16) + torch.ones(2)).dtype == torch.float32
            finally:
                os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [f.data["forks"] for f in session.report.findings if f.code == "child-process-unwatched"] == [1]


def test_no_fork_no_note():
    with dd.watch() as session:
        torch.ones(2) + 1
    assert "child-process-unwatched" not in session.report.codes()
