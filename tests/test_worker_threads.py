"""issue 20: torch calls in a worker thread outside any module call are watched, and a thread's
uncaught dtype error is a finding that names the thread; the user's excepthook still runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from dtype_doctor import watch

ROOT = Path(__file__).resolve().parents[1]


def halves() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(4, 4), torch.randn(4, 4, dtype=torch.float16)


def test_a_pool_worker_promotion_outside_modules_is_seen_and_the_result_is_bitwise_the_same():
    def work() -> torch.Tensor:
        a, b = halves()
        return a + b  # no module call: before, nothing watched this thread

    with ThreadPoolExecutor(1) as pool:
        plain = pool.submit(work).result()
    with watch() as session, ThreadPoolExecutor(1) as pool:
        watched = pool.submit(work).result()
    assert torch.equal(plain, watched) and watched.dtype == plain.dtype  # observe: unchanged
    (found,) = [f for f in session.report.findings if f.code == "silent-promotion"]
    assert found.location.file.endswith("test_worker_threads.py")
    assert "operand0 float32, operand1 float16" in found.message


def test_an_uncaught_dtype_error_in_a_thread_is_a_finding_and_the_users_hook_still_runs():
    seen: list[str] = []
    users_hook = threading.excepthook

    def mine(args: threading.ExceptHookArgs) -> None:
        seen.append(f"{args.thread.name}: {args.exc_value}")

    def work() -> None:
        a, b = halves()
        torch.mm(a, b)

    threading.excepthook = mine
    try:
        with watch() as session:
            worker = threading.Thread(target=work, name="loader-1")
            worker.start()
            worker.join()
        assert threading.excepthook is mine  # restored to the user's after the session
    finally:
        threading.excepthook = users_hook
    # the user's hook got the user's exception, unchanged
    assert seen and seen[0].startswith("loader-1: expected m1 and m2 to have the same dtype")
    (found,) = session.report.errors
    assert found.code == "matmul-dtype-mismatch" and found.data["thread"] == "loader-1"
    assert "uncaught in thread 'loader-1'" in found.message


def test_run_names_the_thread_instead_of_no_problems_found(tmp_path: Path):
    script = tmp_path / "worker.py"
    script.write_text(
        textwrap.dedent(
            """
            import threading
            import torch

            def work():
                a = torch.randn(4, 4)
                b = torch.randn(4, 4, dtype=torch.float16)
                torch.mm(a, b)

            t = threading.Thread(target=work, name="loader-1")
            t.start()
            t.join()
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "dtype_doctor", "run", str(script)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    text = out.stdout + out.stderr
    assert "ERROR matmul-dtype-mismatch" in text
    assert "uncaught in thread 'loader-1'" in text
    assert f"where  mm at {script}:8" in text or "worker.py:8" in text
    assert "Exception in thread loader-1" in text  # the default hook's traceback, as without the tool
    assert "no problems found" not in text
