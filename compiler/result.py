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


# The dataclasses a phase result or fan-out result may hold: the only types the data-only
# codec (pipeline/codec.py) writes and reconstructs. A name read from a file is looked up
# here, never imported. A new result dataclass goes here (the codec names it if it is missing).
RESULT_TYPES = (
    "compiler.result.Rejection",
    "compiler.target.Target",
    "compiler.policy.Policy",
    "compiler.ir.Tensor", "compiler.ir.Op", "compiler.ir.Repeat", "compiler.ir.Graph",
    "compiler.phases.ModelResult", "compiler.phases.ReferenceResult",
    "compiler.plan.Candidate", "compiler.plan.PlanResult", "compiler.plan.matmul.Grid",
    "compiler.expand.Expanded", "compiler.expand.ExpandResult", "compiler.expand.tilegraph.TileGraph",
    "compiler.place.config.PlaceConfig", "compiler.place.problem.Solution",
    "compiler.place.phase.Support", "compiler.place.phase.Placement", "compiler.place.phase.PlaceResult",
    "compiler.schedule.Schedule",
    "compiler.lower.program.Program", "compiler.lower.LowerResult",
    "compiler.run.RunResult",
    "compiler.report.ReportResult",
    "compiler.spatial.SpatialPlan",
    "compiler.pod.split.Split", "compiler.pod.phases.PodResult", "compiler.pod.run.ChipRun", "compiler.pod.run.PodRun",
)
