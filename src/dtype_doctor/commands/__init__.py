"""One module per CLI command: each has HELP, add_arguments(parser) and run(args) -> int.

Command modules must not import torch at module level: `--help` and `explain` stay fast.
"""

COMMANDS = ("explain", "run", "check", "audit", "numerics", "compare", "env", "merge")
