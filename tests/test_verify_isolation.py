"""Issue 30 item 1 / issue 29 item 4: verifying a fix is invisible to the user's program, and its
label tells the truth. Each test runs the same block with and without `watch()` (or the same script
under plain python and `run --diff`) and compares what the user can observe."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import dtype_doctor as dd

ROOT = Path(__file__).resolve().parents[1]


class Net(nn.Module):
    """A bfloat16 layer behind a forward with side effects; fed float32, it fails."""

    def __init__(self, effect=None) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8).to(torch.bfloat16)
        self.effect = effect or (lambda x: None)

    def forward(self, x, cache=None):
        self.effect(x)
        if cache is not None:
            cache.entries.append(x.shape)
        return self.lin(x)

    def decode(self, z):
        return self.lin(torch.tanh(z))


def _watched(block, model):
    """Run block() under watch; the session (its fixes verified)."""
    with pytest.raises(RuntimeError, match="dtype"), dd.watch(model=model) as session:
        block()
    return session


def _plain(block):
    with pytest.raises(RuntimeError, match="dtype"):
        block()


def _labels(session):
    return [(f.snippet, f.verified, f.verification) for f in session.report.errors[0].fixes]


def _verified_some(session):
    assert any(v for _, v, _ in _labels(session)), _labels(session)


def test_a_forward_that_prints_and_counts_runs_once(capfd):
    counter = {"n": 0}

    def effect(x):
        print("forward ran")
        counter["n"] += 1

    model = Net(effect)
    x = torch.randn(2, 8)
    _plain(lambda: model(x))
    plain = capfd.readouterr().out, counter["n"]
    counter["n"] = 0
    session = _watched(lambda: model(x), model)
    assert (capfd.readouterr().out, counter["n"]) == plain == ("forward ran\n", 1)
    _verified_some(session)  # the replays ran: in a child of their own


@pytest.mark.parametrize("absolute", [False, True])
def test_a_forward_that_appends_to_a_file_appends_once(tmp_path, monkeypatch, absolute):
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "calls.log"

    def effect(x):
        with open(log if absolute else "calls.log", "a") as fh:
            fh.write("call\n")

    model = Net(effect)
    x = torch.randn(2, 8)
    _plain(lambda: model(x))
    plain = log.read_text()
    log.unlink()
    session = _watched(lambda: model(x), model)
    assert log.read_text() == plain == "call\n"
    assert sorted(os.listdir(tmp_path)) == ["calls.log"]
    if absolute:  # outside the replay's scratch directory: the guard stops the replay
        labels = [t for _, _, t in _labels(session)]
        assert "not verified (the call writes files)" in labels, labels
        assert not any(v for _, v, _ in _labels(session))
    else:  # a relative path lands in the replay's scratch directory
        _verified_some(session)


def _draws():
    return torch.randn(3).tolist(), random.random(), np.random.rand()


def _seeded():
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)


def test_random_streams_after_a_watch_equal_plain():
    def effect(x):  # a forward that draws from all three generators
        torch.nn.functional.dropout(x, 0.5, training=True)
        random.random()
        np.random.rand()

    model = Net(effect)
    x = torch.ones(2, 8)
    _seeded()
    _plain(lambda: model(x))
    plain = _draws()
    _seeded()
    session = _watched(lambda: model(x), model)
    assert _draws() == plain
    _verified_some(session)


def test_a_call_site_expression_is_evaluated_once():
    calls = []

    def get_batch():
        calls.append(1)
        return torch.randn(2, 8)

    vae = Net()
    _plain(lambda: vae(get_batch()))
    assert calls == [1]
    with pytest.raises(RuntimeError, match="dtype"), dd.watch(model=vae) as session:
        vae(get_batch())
    assert calls == [1, 1]
    _verified_some(session)


class Batch:
    def __init__(self) -> None:
        self.x = torch.randn(2, 8)


def test_a_non_tensor_batch_is_not_converted_by_a_fix():
    batch = Batch()
    model = Net()
    with pytest.raises(RuntimeError, match="dtype"), dd.watch(model=model) as session:
        model(batch.x)
    assert batch.x.dtype == torch.float32
    labels = _labels(session)
    assert any(s.startswith("batch.x = ") and v for s, v, _ in labels), labels  # it ran, on a copy


def test_the_users_forward_hooks_fire_once():
    fired = []
    model = Net()
    x = torch.randn(2, 8)
    handle = model.register_forward_pre_hook(lambda m, a: fired.append("pre"))
    _plain(lambda: model(x))
    plain = list(fired)
    fired.clear()
    session = _watched(lambda: model(x), model)
    handle.remove()
    assert fired == plain == ["pre"]
    _verified_some(session)


class Cache:
    def __init__(self) -> None:
        self.entries: list = []


def test_a_kv_cache_passed_in_is_not_appended_to_by_replays():
    model = Net()
    x = torch.randn(2, 8)
    plain = Cache()
    _plain(lambda: model(x, cache=plain))
    cache = Cache()
    session = _watched(lambda: model(x, cache=cache), model)
    assert len(cache.entries) == len(plain.entries) == 1
    _verified_some(session)


def test_without_fork_a_library_model_is_replayed_in_process_sealed(monkeypatch):
    monkeypatch.setenv("DTYPE_DOCTOR_VERIFY_IN_PROCESS", "1")  # as when CUDA is initialised
    model = nn.Sequential(nn.Dropout(0.5), nn.Linear(8, 8)).to(torch.bfloat16)  # dropout draws
    fired = []
    model.register_forward_pre_hook(lambda m, a: fired.append("pre"))
    x = torch.ones(2, 8)
    _seeded()
    _plain(lambda: model(x))
    plain = _draws(), list(fired)
    fired.clear()
    _seeded()
    session = _watched(lambda: model(x), model)
    assert (_draws(), fired) == plain
    _verified_some(session)


def test_without_fork_the_users_own_code_is_not_replayed(monkeypatch, capfd):
    monkeypatch.setenv("DTYPE_DOCTOR_VERIFY_IN_PROCESS", "1")
    model = Net(lambda x: print("forward ran"))
    x = torch.randn(2, 8)
    session = _watched(lambda: model(x), model)
    assert capfd.readouterr().out == "forward ran\n"
    labels = [t for _, _, t in _labels(session)]
    assert any(t.startswith("not verified (the call runs code of yours") for t in labels), labels
    assert not any(v for _, v, _ in _labels(session))


ZERO = """
import torch
import dtype_doctor as dd

model = torch.nn.Linear(8, 8).to(torch.bfloat16)
try:
    with dd.watch(model=model) as session:
        model(torch.randn(2, 8))  # a new batch each time it is evaluated: replayed as recorded
except RuntimeError:
    pass
for fix in session.report.errors[0].fixes:
    print(repr(fix.snippet.split("#")[0].strip()), fix.verified, fix.verification)
"""


def test_a_fix_whose_output_is_fp32s_reports_error_zero(tmp_path):
    (tmp_path / "zero.py").write_text(ZERO)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "zero.py"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("'model = model.float()'")), "")
    assert "True verified: passes, max rel. error 0e+00 vs fp32 (threshold 5e-02)" in line, done


def test_a_comment_only_fix_is_never_run_nor_verified():
    from dtype_doctor.report import Fix
    from dtype_doctor.watching import verify

    model = Net()
    x = torch.randn(2, 8)
    with pytest.raises(RuntimeError, match="dtype"), dd.watch(model=model) as session:
        model(x)
    finding = session.report.errors[0]
    comment = Fix("Upcast every operand", "# upcast every operand with .float() before the op\npass", "")
    finding.fixes.insert(0, comment)

    made = types.SimpleNamespace(  # the context the fixes were made in: this frame's names
        scope=sys._getframe(), inner={}, root_expr=None, call_src=(["x"], {})
    )
    verify.verify(finding, verify.Call(model, "forward", (x,), {}), made, None)
    assert comment.verified is None and comment.verification.startswith("not verified (a comment"), comment
    assert finding.fixes[0] is not comment and finding.fixes[0].verified is True, _labels(session)


SCRIPT = """
import sys
import torch

line = sys.stdin.readline()
with open("out.txt", "a") as fh:
    fh.write(line)
torch.manual_seed(0)
model = torch.nn.Linear(4, 4).to(torch.bfloat16)
x = torch.randn(2, 4)
print(model(x).sum())
"""


def test_run_diff_leaves_the_users_folder_and_stdin_alone(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    plain = subprocess.run(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        input="first\nsecond\n",
        capture_output=True,
        text=True,
        env=env,
    )
    assert plain.returncode != 0 and (tmp_path / "out.txt").read_text() == "first\n"
    (tmp_path / "out.txt").unlink()
    before = sorted(os.listdir(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "dtype_doctor", "run", "--diff", "train.py"],
        cwd=tmp_path,
        input="first\nsecond\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert (tmp_path / "out.txt").read_text() == "first\n", done.stdout + done.stderr
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "out.txt"])
    assert "not verified (the call reads input)" in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_patch_that_changes_only_comments_is_never_rerun_nor_verified():
    from dtype_doctor.editing.source import Edit
    from dtype_doctor.patching import search
    from dtype_doctor.patching.plan import Candidate, Cause

    text = "x = 1\n"
    comment = Edit("train.py", 0, 0, "# upcast every operand with .float()\n")
    runs = []
    _, _, result = search(
        [Cause("c", [Candidate("upcast", [comment])])], {"train.py": text}, lambda f: runs.append(f)
    )
    assert runs == [] and not result.passed
    assert (
        result.describe()
        == "re-run of the patched copy: not verified (a comment or an empty edit: no code to run)"
    )


def test_the_rerun_resolves_a_relative_pythonpath_against_the_users_cwd(tmp_path, monkeypatch):
    """`PYTHONPATH=tests dtype-doctor run --diff ...`: the re-run's cwd is a scratch copy, so a
    relative entry is made absolute against the user's cwd; one inside the copied folder comes first
    as its (patched) copy."""
    from dtype_doctor.verifying.rerun import pythonpath

    anchor, scratch = tmp_path / "proj", tmp_path / "scratch"
    (anchor / "pkg").mkdir(parents=True)
    (scratch / "pkg").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    got = pythonpath(os.pathsep.join(["tests", "proj/pkg", str(tmp_path / "abs")]), str(scratch), str(anchor))
    assert got == [str(tmp_path / "tests"), str(scratch / "pkg"), str(anchor / "pkg"), str(tmp_path / "abs")]
    assert pythonpath("", str(scratch), str(anchor)) == []


def test_the_guard_lets_a_loopback_port_probe_through_but_no_reachable_socket(tmp_path):
    """urllib3's IPv6 probe (diffusers' import) binds ('::1', 0); any other bind, or a connect, stops."""
    code = textwrap.dedent(
        f"""
        import socket
        from dtype_doctor.verifying.guard import Guard, Stopped
        Guard({str(tmp_path)!r}).install()
        s = socket.socket(socket.AF_INET)
        s.bind(("127.0.0.1", 0))
        for address in [("0.0.0.0", 0), ("", 0), ("127.0.0.1", 8765)]:
            try:
                socket.socket(socket.AF_INET).bind(address)
                print("through", address)
            except Stopped:
                print("stopped")
        try:
            s.connect(("127.0.0.1", 9))
            print("through connect")
        except Stopped:
            print("stopped")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.stdout.split() == ["stopped"] * 4, proc.stdout + proc.stderr


def test_the_guard_lets_a_library_read_the_linker_cache_but_no_other_process(tmp_path):
    """ctypes.util.find_library runs `ldconfig -p` (torch's import on Python 3.10): a read, not a
    side effect; any other program stops the replay."""
    code = textwrap.dedent(
        f"""
        import subprocess
        from dtype_doctor.verifying.guard import Guard, Stopped
        Guard({str(tmp_path)!r}).install()
        for argv in (["ldconfig", "-p"], ["touch", {str(tmp_path.parent / "outside")!r}]):
            try:
                subprocess.run(argv, capture_output=True)
                print("through")
            except Stopped:
                print("stopped")
            except OSError:
                print("through")  # no ldconfig on PATH: it was let through all the same
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.stdout.split() == ["through", "stopped"], proc.stdout + proc.stderr
    assert not (tmp_path.parent / "outside").exists()


def test_the_experiments_reruns_never_write_a_users_checkpoint_or_database(tmp_path: Path) -> None:
    """torch.save to a path and sqlite write through C, where the audit hook's `open` event never
    fires: the re-runs of run's experiment are stopped there too, and the user's files keep the
    bytes the user's own run wrote."""
    import json
    import sqlite3

    outside = tmp_path / "outside"
    outside.mkdir()
    ckpt, db = outside / "ckpt.pt", outside / "track.db"
    (tmp_path / "work").mkdir()
    script = tmp_path / "work" / "train.py"
    script.write_text(
        "import sqlite3, torch\nfrom torch import nn\n"
        f"torch.save({{'step': 1}}, {str(ckpt)!r})\n"
        f"con = sqlite3.connect({str(db)!r})\n"
        "con.execute('create table if not exists t(x)'); con.execute('insert into t values (1)'); con.commit()\n"
        "model = nn.Linear(4, 4).half()\nmodel(torch.randn(2, 4))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DTYPE_DOCTOR_BUDGET"}
    env.update(PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "dtype_doctor", "run", "--json=r.json", "--budget=15", "train.py"],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads((script.parent / "r.json").read_text())
    assert report["meta"]["experiment"]["tried"] >= 1
    assert "the call writes files" in report["meta"]["experiment"]["outcome"]
    assert sqlite3.connect(db).execute("select count(*) from t").fetchone() == (1,)  # the user's run only


def test_a_replay_stuck_on_a_lock_another_thread_held_at_the_fork_is_stopped_early():
    """Threads do not follow a fork: a lock another thread of the program held then stays held in
    the child forever. The replay is stopped once it has not run for STALLED_S, with that reason,
    not after the 300 s deadline (issue 42, H12)."""
    import threading

    from dtype_doctor.verifying import isolation

    lock, held, done = threading.Lock(), threading.Event(), threading.Event()

    def holder():
        with lock:
            held.set()
            done.wait()

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    held.wait()
    try:
        outcome = isolation.in_child(lambda: lock.acquire() and "acquired", timeout=120)
    finally:
        done.set()
        thread.join()
    assert outcome.stopped and "stopped running" in outcome.stopped, outcome
    assert "another thread of your program" in outcome.stopped
    assert isolation.in_child(lambda: lock.acquire() and "acquired").value == "acquired"  # free: it runs


def test_a_replay_past_its_memory_bound_is_stopped() -> None:
    # H14: a replay may hold what the program held and as much again and a half (at least 1 GiB more)
    import time

    from dtype_doctor.verifying import isolation

    bound = isolation.memory_bound()
    assert bound is not None

    def hog() -> str:
        held = torch.ones(bound // 4 + (64 << 20))  # float32: past the bound, touched
        time.sleep(30)
        return str(held.shape)

    outcome = isolation.in_child(hog, timeout=120)
    assert outcome.stopped and "past its bound" in outcome.stopped, outcome
    assert isolation.in_child(lambda: "small").value == "small"
