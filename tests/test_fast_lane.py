"""The fast lane's lists (tests/conftest.py) name tests that exist, and every command is in the lane."""

from __future__ import annotations

import re
from pathlib import Path

import conftest
from dtype_doctor.commands import COMMANDS

TESTS = Path(__file__).resolve().parent


def test_every_test_the_lane_names_exists():
    for file, names in {**conftest.ONLY, **conftest.EXCEPT}.items():
        defined = set(re.findall(r"^def (test_\w+)\(", (TESTS / file).read_text(), re.M))
        assert names <= defined, f"{file}: {sorted(names - defined)}"
    assert all((TESTS / file).is_file() for file in conftest.LANE)


def test_the_lane_drives_every_command():
    source = "\n".join((TESTS / file).read_text() for file in sorted(conftest.LANE))
    driven = {c for c in COMMANDS if re.search(rf"""["']{c}["']""", source)}
    assert driven == set(COMMANDS), sorted(set(COMMANDS) - driven)
