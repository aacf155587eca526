"""A phase's verdict. A trial that does not fit is a result, not a crash: the phase
that found it returns a Rejection with the figures of why, and every later phase
passes it through unchanged (docs/architecture.md §3)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Rejection:
    phase: str
    reason: str                     # memory | max_alloc | exchange_table_cap | placement | ...
    message: str                    # one line naming tile, event and bytes where known
    figures: dict = field(default_factory=dict)   # tile, event, live_bytes, available_bytes, deficit_bytes

    def metrics(self) -> dict:
        return {"phase": self.phase, "reason": self.reason, **self.figures}
