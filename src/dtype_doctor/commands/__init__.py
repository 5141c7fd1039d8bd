"""One module per CLI command: each has HELP, add_arguments(parser) and run(args) -> int.

Command modules must not import torch at module level: `--help` and `explain` stay fast.
"""

# the exit status every command returns (cli.main returns EXIT_USAGE for bad input)
EXIT_OK = 0
EXIT_FINDINGS = 1  # errors found
EXIT_USAGE = 2
EXIT_NOTHING = 3  # explain recognised nothing

COMMANDS = (
    "explain",
    "run",
    "check",
    "audit",
    "numerics",
    "compare",
    "env",
    "merge",
    "precommit",
    "completion",
)

# --fail-on: the least severity that makes a command exit EXIT_FINDINGS ("never": none does)
FAIL_ON = ("error", "warning", "never")
_FAILING = {"error": ("error",), "warning": ("error", "warning"), "never": ()}


def exit_status(code: int, report: object, fail_on: str | None, *, own_code: bool = False) -> int:
    """The exit status with `--fail-on` applied to the report the command showed.

    Without `fail_on` (or without a report) the command's own `code` stands. Only a verdict on
    findings (EXIT_OK, EXIT_FINDINGS) is replaced; bad usage and "nothing recognised" stand.
    `own_code`: the code is a program's own (run's script), so a failure (non-zero) wins.
    """
    if fail_on is None or report is None:
        return code
    if own_code and code != EXIT_OK:
        return code
    if not own_code and code not in (EXIT_OK, EXIT_FINDINGS):
        return code
    failing = _FAILING[fail_on]
    findings = getattr(report, "findings", ())
    return EXIT_FINDINGS if any(str(f.severity) in failing for f in findings) else EXIT_OK
