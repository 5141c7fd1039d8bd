"""torch.compile under watch: step aside inside compiled regions, and say so.

Dynamo traces Python it meets, the watcher's TorchFunctionMode and global module hooks included;
tracing their bookkeeping breaks compilation ("UnspecializedNNModuleVariable ... already tracked
for mutation", "Guard failed on the same frame"). So while dynamo traces, the hooks do nothing and
the mode calls the op straight through: the graph holds the user's ops only, the user's program
runs as it would without the tool, and an error inside it is the user's own. Ops the compiled
code runs through Python (graph breaks, the eager and aot_eager backends' graphs, as aten ops)
are still watched; inductor's kernels are not. When a session saw dynamo compile something, it
says so.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..catalog.family_codes import COMPILED_REGION_UNWATCHED

if TYPE_CHECKING:
    from ..report import Finding


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process so far (0 when it was never imported)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return 0


class CompileNotice:
    """Counts the graphs compiled while a session runs; a finding says they were not watched."""

    def __init__(self) -> None:
        self.start = graphs_compiled()

    def finding(self) -> Finding | None:
        graphs = graphs_compiled() - self.start
        if graphs <= 0:
            return None
        from .. import catalog

        return catalog.finding(
            COMPILED_REGION_UNWATCHED,
            names={"graphs": graphs},
            message=f"torch.compile compiled {graphs} graph(s) while watching: dtype-doctor stepped "
            "aside while dynamo traced them, so compiled ops were checked only where the graph runs "
            "them through Python (eager/aot_eager backends, graph breaks), not inside inductor kernels",
            data={"graphs": graphs},
        )
