"""run: execute the lowered program on the simulator and validate it against the
numpy reference computed in the model phase (DESIGN §3.7)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import sim
from .target import Target


@dataclass
class RunResult:
    cycles: int = 0
    cycles_per_layer: int = 0        # one Repeat iteration (= cycles without a Repeat)
    cycles_per_step: list = field(default_factory=list)
    step_kind: list = field(default_factory=list)
    tile_cycles: np.ndarray | None = None
    host_cycles: int = 0
    ms: float = 0.0
    max_abs_error: float = float("nan")
    tolerance: float = 0.0
    validated: bool = False
    rejection: object = None

    def metrics(self) -> dict:
        if self.rejection:
            return {"validated": False}
        return {"cycles": self.cycles, "cycles_per_layer": self.cycles_per_layer, "ms": round(self.ms, 6),
                "host_cycles": self.host_cycles,
                "max_abs_error": self.max_abs_error, "tolerance": self.tolerance,
                "validated": self.validated, "supersteps": len(self.cycles_per_step)}


def run(lower_res, model, t: Target) -> RunResult:
    """Per-layer cycles come from the profile: the supersteps of the last iteration."""
    if lower_res.rejection:
        return RunResult(rejection=lower_res.rejection)
    prog = lower_res.program
    streams = {n: np.ascontiguousarray(model.data[n]).view(np.uint8).ravel() for n in prog.in_streams}
    r = sim.run(prog, streams)
    err = 0.0
    for name, ref in model.reference.items():
        got = r.outputs[name].view(np.float16).reshape(ref.shape).astype(np.float64)
        d = np.abs(got - ref.astype(np.float64))
        err = max(err, float(d.max()) if np.isfinite(d).all() else float("inf"))
    count = model.graph.repeat.count if model.graph.repeat else 1
    per_iter = len(r.step_cycles) // count
    return RunResult(cycles=int(r.total_cycles), cycles_per_layer=int(sum(r.step_cycles[-per_iter:])),
                     cycles_per_step=[int(c) for c in r.step_cycles],
                     step_kind=list(r.step_kind), tile_cycles=r.tile_cycles, host_cycles=int(r.host_cycles),
                     ms=r.total_cycles / t.clock_hz * 1e3, max_abs_error=err, tolerance=model.tolerance,
                     validated=bool(err <= model.tolerance))
