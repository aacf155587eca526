"""plan: choose a strategy per op and rank whole-graph candidates (DESIGN §3.2).

Each matmul's grids are enumerated, costed and memory-screened with numpy; other
ops follow their producer's layout (or convert to whole rows). Candidate c takes
the c-th best grid of every matmul (a rank-aligned beam), so candidates differ
everywhere and expand's exact screening decides among them."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..policy import Policy
from ..result import Rejection
from ..target import DTYPE_BYTES, Target
from .matmul import Grid, best_grids


@dataclass(frozen=True)
class Candidate:
    strategy: tuple            # (op index, Grid) for every matmul
    cycles: int                # estimate: sum of the ops' estimates

    @property
    def grids(self) -> dict:
        return dict(self.strategy)

    @property
    def label(self) -> str:
        return " ".join(f"op{n}:{g.label}" for n, g in self.strategy)


@dataclass
class PlanResult:
    candidates: list[Candidate] = field(default_factory=list)
    considered: int = 0
    rejected: dict = field(default_factory=dict)
    rejection: Rejection | None = None

    def metrics(self) -> dict:
        return {"candidates": len(self.candidates), "considered": self.considered,
                "rejected": self.rejected,
                "best_cycles_estimate": self.candidates[0].cycles if self.candidates else None}


def home_bytes(graph, t: Target) -> int:
    """Bytes of input and parameter homes on the fullest tile (whole rows over all tiles)."""
    total = 0
    for x in graph.tensors.values():
        if x.kind in ("input", "param"):
            rows, cols = x.shape
            total += -(-rows // t.tiles) * cols * DTYPE_BYTES[x.dtype]
    return total


def plan(model, target: Target, policy: Policy) -> PlanResult:
    g = model.graph
    homes = home_bytes(g, target)
    per_op: dict[int, list[Grid]] = {}
    rejected, considered = Counter(), 0
    for n, op in enumerate(g.ops):
        if op.kind != "matmul":
            continue
        A, B = (g.tensors[x] for x in op.inputs)
        G = len(op.attr("groups", ((0,) * 6,)))
        grids, rej, cons, lean = best_grids(G, op.attr("m"), op.attr("k"), op.attr("n"), A.dtype, B.dtype,
                                            bool(op.attr("transpose_b", False)), target,
                                            policy.plan_candidates, homes, policy.grid_dims)
        rejected.update(rej)
        considered += cons
        if not grids:
            res = PlanResult([], considered, dict(rejected))
            avail = target.tile_bytes
            if policy.grid:
                res.rejection = Rejection("plan", "grid", f"op {n} ({op.outputs[0]}): policy.grid={policy.grid} "
                                          f"is not a feasible grid on {target.tiles} tiles (blocks must be "
                                          f"whole words and the grid must fit)", {})
            else:
                res.rejection = Rejection(
                    "plan", "memory",
                    f"op {n} ({op.outputs[0]}): no grid of {cons} fits: the leanest needs {lean} B on its "
                    f"fullest tile, {avail} B available (deficit {lean - avail} B)",
                    {"tile": -1, "op": op.outputs[0], "live_bytes": lean, "available_bytes": avail,
                     "deficit_bytes": max(0, lean - avail)})
            return res
        per_op[n] = grids
    width = max((len(v) for v in per_op.values()), default=1)
    cands = []
    for c in range(min(policy.plan_candidates, width)):
        strat = tuple((n, grids[min(c, len(grids) - 1)]) for n, grids in per_op.items())
        cands.append(Candidate(strat, sum(gr.cycles for _, gr in strat)))
    return PlanResult(cands, considered, dict(sorted(rejected.items())))
