"""The readers of the user's source that cache a parse see the file as it is now: another directory's
file of the same relative name (a report's places are relative to where it ran; a notebook or a test
runner changes directory between runs) and the same file edited since (`run --write`) are not the
tree read before."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dtype_doctor.numerics.opsource import source_tree
from dtype_doctor.remedies.scope import file_names


@pytest.fixture
def two_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "train.py").write_text("alpha = 1\n")
    (second / "train.py").write_text("import torch\nbeta = torch.zeros(2)\n")
    monkeypatch.chdir(first)
    return first, second


def _names(tree) -> set[str]:
    return {t.id for node in tree.body for t in getattr(node, "targets", [])}


def test_the_same_relative_name_in_another_directory_is_read_again(two_dirs, monkeypatch) -> None:
    _, second = two_dirs
    assert "alpha" in file_names("train.py") and _names(source_tree("train.py")) == {"alpha"}
    monkeypatch.chdir(second)
    assert "beta" in file_names("train.py") and "alpha" not in file_names("train.py")
    assert _names(source_tree("train.py")) == {"beta"}


def test_a_file_edited_since_it_was_read_is_read_again(two_dirs) -> None:
    first, _ = two_dirs
    path = str(first / "train.py")
    assert _names(source_tree(path)) == {"alpha"} and "gamma" not in file_names(path)
    (first / "train.py").write_text("alpha = 1\ngamma = alpha + 1\n")
    later = time.time() + 5  # a coarse file clock would otherwise show the same time
    os.utime(path, (later, later))
    assert _names(source_tree(path)) == {"alpha", "gamma"} and "gamma" in file_names(path)
