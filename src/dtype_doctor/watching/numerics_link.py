"""watch(numerics=True): the numerics monitor started beside the watch, naming modules as the watch
names them and asking the watch's provenance where a tensor was made."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from . import computed_in, keep_through_cast


def start(session: Any) -> Any:
    """A started NumericsMonitor writing into the session's report."""
    try:
        from ..numerics import NumericsMonitor
    except ImportError as exc:
        from ..errors import DoctorError

        raise DoctorError(f"numerics monitoring is not available in this build ({exc})") from None
    from . import user_places
    from .autocast_regions import enclosing_region
    from .provenance import tag_to_origin, where

    def origin_of(t: torch.Tensor) -> Any:
        """Where `t` got its dtype (a report Origin), or None when the watch has not seen it made."""
        tag = session.prov.lookup(t)
        return tag_to_origin(tag, session.names.module) if tag is not None else None

    def place_of(root: nn.Module) -> dict[str, Any] | None:
        """The user's name for a root the monitor meets, and the lines its fixes are pasted at."""
        try:
            return user_places.of_root(root)
        except Exception:
            return None

    def region_of() -> tuple[str, int, str] | None:
        """(file, line, text) of the `with torch.autocast(...)` the running module call is in."""
        found = enclosing_region(2)
        if found is None:
            return None
        file, line, _ = where(found[0])
        return (file or "?", line or 0, found[1])

    held: list[bool] = []

    def aside(on: bool) -> None:
        """The monitor's own float32 re-runs and scans: the watch passes their ops straight through
        (a mismatch inside the tool's copy of a module is never the user's)."""
        if on:
            held.append(session.active)
            session.active = False
        elif held:
            session.active = held.pop()

    model = session.model if isinstance(session.model, nn.Module) else None
    monitor = NumericsMonitor(
        report=session.report,
        model=model,
        every=session.every,
        name_of=session.names.module,
        origin_of=origin_of,
        place_of=place_of,
        region_of=region_of,
        aside=aside,
    )
    return _Linked(monitor.start(), session)


class _Linked:
    """The started monitor; its stop() also says where each silent finding's low dtype was chosen."""

    def __init__(self, monitor: Any, session: Any) -> None:
        self.monitor = monitor
        self.session = session

    def stop(self) -> Any:
        report = self.monitor.stop()
        try:
            computed_in.annotate(self.session.report, self.session.names, self.session.prov)
            keep_through_cast.attach(self.session)
        except Exception as exc:  # the tool's bookkeeping never replaces the user's outcome
            self.session.internal_error(exc)
        return report

    def __getattr__(self, name: str) -> Any:
        return getattr(self.monitor, name)
