"""Probe: the main code ends while a non-daemon thread still works; the thread then fails with a
dtype mismatch. python waits for the thread at exit (and prints its traceback)."""

import threading
import time

import torch


def worker() -> None:
    time.sleep(0.5)
    weight = torch.randn(4, 4, dtype=torch.float16)
    torch.mm(torch.randn(2, 4), weight)


threading.Thread(target=worker).start()
print("main done")
