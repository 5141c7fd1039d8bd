"""The fast lane (`make test-fast`, `pytest -m fast`): the tests that drive each command's main path
(explain, run, check, audit, numerics, compare, env, merge; compare's through
test_terminal_manners.py), the report and its outputs, the catalog
codes and the terminal manners, marked `fast` here by file so that no test file changes for it.
A test of these files that is marked `slow` stays out of the lane."""

from __future__ import annotations

import pytest

FAST_FILES = {
    "test_cli.py",
    "test_explain_cli.py",
    "test_run.py",
    "test_check.py",
    "test_audit.py",
    "test_numerics_cli.py",
    "test_env.py",
    "test_merge.py",
    "test_report.py",
    "test_catalog_codes.py",
    "test_inputs.py",
    "test_terminal_manners.py",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in FAST_FILES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)
