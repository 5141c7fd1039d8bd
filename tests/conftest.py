"""The fast lane (`make test-fast`, `pytest -m fast`): the tests that drive each command's main path
(explain, run, check, audit, numerics, compare, env, merge, precommit, completion), the JSON, SARIF
and GitHub outputs, the report, the catalog codes and the terminal manners, marked `fast` here so
that no test file changes for it. Left out: the edge cases that cost a fresh interpreter or a
library build each (planted or hanging apex installs, `python -m dtype_doctor`, every bad-option
spelling of check);
`make test` runs them. With `-m fast` alone, the files outside the lane are not even collected.
A test of the lane's files that is marked `slow` stays out of it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# `run`'s experiment (re-running the program with candidate edits) costs a few runs of each failing
# script: off for the suite by default, on in the tests of the experiment (tests/test_experiment.py),
# which pass --budget themselves
os.environ.setdefault("DTYPE_DOCTOR_BUDGET", "0")

# every test of these files
WHOLE = {
    "test_cli.py",
    "test_explain_cli.py",
    "test_audit.py",
    "test_numerics_cli.py",
    "test_merge.py",
    "test_config.py",  # [tool.dtype-doctor] and `precommit`
    "test_completion.py",
    "test_fast_lane.py",
    "test_outputs.py",  # --output, SARIF, GitHub annotations, --fail-on
    "test_report.py",
    "test_catalog_codes.py",
    "test_inputs.py",
}
# only these tests (by function name) of these files
ONLY = {
    "test_check.py": {
        "test_unet_fp16_fp32_sample_same_first_failure_as_real_run",
        "test_llama_fp32_inputs_embeds_same_first_failure_and_plain_meta_misses_it",
        "test_cli_check_finds_mismatch_exit_1_and_json",
        "test_cli_check_clean_exit_0",
        "test_cli_check_hf_config",
        "test_api_check_rejects_what_the_cli_rejects",
    },
    "test_compare.py": {"test_cli_json_and_plot"},
    "test_env.py": {  # this process's environment; the planted-library tests each start an interpreter
        "test_clean_environment_reports_facts_and_no_library_hazards",
        "test_gpu_facts_match_torch",
        "test_environment_api_and_console",
        "test_an_apex_that_crashes_on_import_does_not_break_env",
        "test_package_info_does_not_import",
    },
}
# every test of these files but these
EXCEPT = {
    "test_run.py": {
        "test_python_dash_m_dtype_doctor_run_in_a_subprocess",
        "test_fp16_parameters_trained_without_master_weights_are_named_by_their_module_path",
    },
    "test_terminal_manners.py": {"test_run_shows_the_noted_diagnosis_once_on_stderr"},
}
LANE = WHOLE | set(ONLY) | set(EXCEPT)


def in_lane(file: str, test: str) -> bool:
    if file in ONLY:
        return test in ONLY[file]
    return file in WHOLE or (file in EXCEPT and test not in EXCEPT[file])


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """`-m fast`: the test files outside the lane are not imported (their models, their libraries)."""
    if config.getoption("markexpr", "") == "fast" and collection_path.name.startswith("test_"):
        return (collection_path.suffix == ".py" and collection_path.name not in LANE) or None
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = getattr(item, "originalname", item.name)
        if in_lane(item.path.name, name) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)
    # the long tests first: pytest-xdist deals them out before the rest, so that no worker is left
    # running a minute-long test alone at the end while the other waits
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
