"""One module per CLI command: each has HELP, add_arguments(parser) and run(args) -> int.

Command modules must not import torch at module level: `--help` and `explain` stay fast.
"""

# the exit status every command returns (cli.main returns EXIT_USAGE for bad input)
EXIT_OK = 0
EXIT_FINDINGS = 1  # errors found
EXIT_USAGE = 2
EXIT_NOTHING = 3  # explain recognised nothing

COMMANDS = ("explain", "run", "check", "audit", "numerics", "compare", "env", "merge")
