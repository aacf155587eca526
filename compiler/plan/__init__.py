"""plan: choose strategies per op and rank candidates (DESIGN §3.2)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..policy import Policy
from ..result import Rejection
from ..target import Target
from .gemm import GemmCandidate, plan_gemm


@dataclass
class PlanResult:
    candidates: list[GemmCandidate] = field(default_factory=list)
    considered: int = 0
    rejected: dict = field(default_factory=dict)
    rejection: Rejection | None = None

    def metrics(self) -> dict:
        return {"candidates": len(self.candidates), "considered": self.considered,
                "rejected": self.rejected,
                "best_cycles_estimate": self.candidates[0].cycles if self.candidates else None}


def plan(model, target: Target, policy: Policy) -> PlanResult:
    g = model.graph
    (op,) = g.ops   # the GEMM model: one matmul (more ops arrive with the larger models)
    a, b = (g.tensors[x] for x in op.inputs)
    m, k = a.shape
    n = b.shape[1]
    cands, rejected, considered, best_mem = plan_gemm(m, k, n, a.dtype, target, policy.plan_candidates,
                                                  policy.grid_dims)
    res = PlanResult(cands, considered, rejected)
    if not cands:
        avail = target.tile_bytes
        if policy.grid:
            res.rejection = Rejection("plan", "grid", f"policy.grid={policy.grid}: no such feasible grid for "
                                      f"{m}x{k}x{n} on {target.tiles} tiles (blocks must be whole words "
                                      f"and the grid must fit)", {})
            return res
        res.rejection = Rejection(
            "plan", "memory",
            f"no grid of {considered} fits: the leanest needs {best_mem} B on its fullest tile, "
            f"{avail} B available (deficit {best_mem - avail} B)",
            {"tile": -1, "live_bytes": best_mem, "available_bytes": avail,
             "deficit_bytes": max(0, best_mem - avail)})
    return res
