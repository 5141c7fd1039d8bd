"""The main job on the bundled examples: explain the logs of the five seed cases."""

from __future__ import annotations

import sys
from pathlib import Path

from dtype_doctor.cli import main

LOGS = sorted((Path(__file__).parent / "logs").glob("*.log"))

if __name__ == "__main__":
    status = 0
    for log in LOGS:
        print(
            f"\n=== dtype-doctor explain --file {log.relative_to(Path.cwd()) if log.is_relative_to(Path.cwd()) else log}"
        )
        status = max(status, main(["explain", "--file", str(log)]))
    sys.exit(0 if status in (0, 1) else status)
