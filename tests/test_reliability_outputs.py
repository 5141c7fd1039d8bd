"""Issue 22 items 1-2: a report never overwrites an input, and never replaces a device or a FIFO."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from cli_process import dtype_doctor

MESSAGE = "mat1 and mat2 must have the same dtype, but got Float and Half"


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--html", "train.py", "train.py"],
        ["run", "--json=./train.py", "train.py"],
        ["explain", "--file", "train.log", "--json=train.log"],
        ["explain", "train.log", "--html", "train.log"],
        ["explain", "--file", "train.log", "--json=link.log"],  # a symlink to the input
        ["check", "model.py:build", "--html", "model.py"],
        ["audit", "model.py:build", "--json=model.py"],
    ],
)
def test_an_output_equal_to_an_input_is_refused_and_the_input_kept(tmp_path, argv):
    (tmp_path / "train.py").write_text("print('training')\n")
    (tmp_path / "train.log").write_text(MESSAGE + "\n")
    (tmp_path / "link.log").symlink_to(tmp_path / "train.log")
    (tmp_path / "model.py").write_text("from torch import nn\ndef build():\n    return nn.Linear(2, 2)\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    p = dtype_doctor(*argv, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "is one of the inputs" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_fifo_is_written_in_place_and_its_reader_gets_the_report(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    p = dtype_doctor("explain", MESSAGE, f"--json={fifo}")
    reader.join(timeout=30)
    if reader.is_alive():  # nothing was written into the FIFO: let the reader go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=30)
    assert p.returncode == 0, p.stderr
    assert got and b'"matmul-dtype-mismatch"' in got[0]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO
    assert not list(tmp_path.glob("*.tmp-*"))


def test_dev_fd_n_is_written_in_place(tmp_path):
    r, w = os.pipe()
    try:
        p = dtype_doctor("explain", MESSAGE, f"--json=/dev/fd/{w}", pass_fds=(w,))
        os.close(w)
        w = -1
        data = os.read(r, 1 << 20)
    finally:
        os.close(r)
        if w != -1:
            os.close(w)
    assert p.returncode == 0, p.stderr
    assert b'"matmul-dtype-mismatch"' in data


def test_a_character_device_is_not_replaced(tmp_path):
    dev = tmp_path / "null"
    try:
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a private copy of /dev/null
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a character device here: {exc}")
    try:
        with open(dev, "w") as fh:
            fh.write("")
    except OSError as exc:
        pytest.skip(f"the device cannot be opened here (nodev mount?): {exc}")
    p = dtype_doctor("explain", MESSAGE, f"--json={dev}", "--html", str(dev.with_name("other")))
    assert p.returncode == 0, p.stderr
    assert stat.S_ISCHR(os.stat(dev).st_mode)  # still the device, not a regular file
    assert not list(tmp_path.glob("*.tmp-*"))


def test_a_symlinked_output_replaces_the_file_it_points_at_not_the_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    p = dtype_doctor("explain", MESSAGE, f"--json={link}")
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and "matmul-dtype-mismatch" in target.read_text()
