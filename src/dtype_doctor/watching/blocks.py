"""check's dry run: a mismatch met again in another copy of a repeated block is counted, not rebuilt.

A Llama-7B shape fed float32 embeddings mismatches in every layer: 193 findings, each built with its
origins, blame and fixes (each a walk of the model), which processors.fold_repeated_blocks then
folds into 7. In a dry run the copies are counted on the first finding instead, their modules
recorded as that processor records them, so the report reads the same and the work is done 7 times.
`watch` itself keeps one finding per module (what a live run is asked about).
"""

from __future__ import annotations

from typing import Any

from ..processors import module_pattern


class RepeatedBlocks:
    def __init__(self) -> None:
        self.enabled = False  # set by check's dry run
        self._first: dict[tuple, Any] = {}

    def met(self, key: tuple, path: str | None) -> Any:
        """The finding of this mismatch (`key` = op, code, operand dtypes) in an earlier copy of
        the block at `path` (which it now lists among its modules); None when there is none."""
        if not self.enabled or path is None:
            return None
        found = self._first.get((module_pattern(path), key))
        if found is not None:
            modules = found.data.setdefault("modules", [found.location.module if found.location else None])
            if path not in modules:
                modules.append(path)
        return found

    def first(self, key: tuple, path: str | None, finding: Any) -> None:
        if self.enabled and path is not None:
            self._first.setdefault((module_pattern(path), key), finding)

    def forget(self, finding: Any) -> None:
        """`finding` was taken back: a later copy of its block builds its own."""
        for key in [k for k, v in self._first.items() if v is finding]:
            del self._first[key]
