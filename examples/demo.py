"""The main job on the bundled examples: the five seed cases this project exists for, live on CPU.

For each case: what PyTorch told the user, what dtype-doctor found (module, operands, origins,
fixes), and its first fix with what the tool's replay of the failing call gave: passes or not, and
the error against float32. Every line is computed; none is written here.

    python examples/demo.py            # all five
    python examples/demo.py onetrainer # one of them
    python examples/demo.py -v         # every finding in full
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.rule import Rule

sys.path.insert(0, str(Path(__file__).parent))

from seed_cases import CASES

from dtype_doctor.processors import present
from dtype_doctor.render.console import render, render_brief


def main(names: list[str], console: Console | None = None) -> int:
    full = "-v" in names  # every finding's full box instead of one short block per cause
    names = [n for n in names if n != "-v"]
    console = console or Console(highlight=False)
    chosen = [c for c in CASES if not names or c.__name__ in names]
    if not chosen:
        console.print(f"unknown case(s) {names}; choose from {[c.__name__ for c in CASES]}")
        return 2
    failed = 0
    for case in chosen:
        result = case()
        console.print(Rule(f"[bold]{result.name}"))
        console.print(f"[bold]PyTorch said:[/bold] {result.user_error}")
        for how, report in result.reports:
            console.print(f"[bold]dtype-doctor {how}:[/bold]")
            (render if full else render_brief)(present(report), console=console)
        shown = result.first_fix()
        if shown is not None:  # the tool's own verdict on its fix, as its replay of the failing call gave it
            number, fix = shown
            console.print(
                f"[bold green]Result of fix {number}[/bold green] ({fix.title}): {fix.verification}"
            )
        if result.facts:
            console.print(f"[bold]Measured:[/bold] {result.facts}")
        failed += not any(r.findings for _, r in result.reports)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
