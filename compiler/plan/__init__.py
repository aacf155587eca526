"""plan: choose a strategy per op and rank whole-graph candidates (docs/architecture.md §3).

Each matmul's grids are enumerated, costed and memory-screened with numpy
(plan/matmul.py), each also as 2, 4, .. serial row passes (policy.serial_passes). A beam search over the graph (plan/beam.py) then chooses one grid
per matmul with its neighbours in view: a producer's output layout decides what its
tiles must send to the consumer's grid, and other ops follow their producer's layout
(or convert to whole rows). The `plan_candidates` cheapest complete states are the
candidates, best first; expand's exact screening decides among them.

With policy.weight_stationary the beam also runs with a choice per matmul to keep its
weight resident where the matmul reads it (no B exchange; count × the B blocks in
region 1 of every tile of the grid). Resident grids are laid one after another around
the tiles (Grid.rot), and the beam checks every tile's resident bytes against region 1
and an estimate of the whole tile (plan/beam.py Residency), so residency is chosen per
matmul by cost and memory at any depth: where replication (a grid's gm tiles holding
each block) pays and fits, at a lower replication, or not at all (homes). It runs with
region 1 split in proportion to the weights' sizes and first-come; up to half the
candidates come from these (those keeping at least one weight resident), so a model
too deep for resident weights still has home candidates. policy.resident_replication
caps the replication of resident grids.

policy.plan_beam = 0 is the ablation without the beam: candidate c takes the c-th
best standalone grid of every matmul (rank-aligned), weights in homes."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from ..policy import Policy
from ..result import Rejection
from ..target import DTYPE_BYTES, Target
from .attn import group_variants
from .beam import Costs, Pricing, beam_search, replay_halves
from .options import GRID_FIELDS, Options, Residency, with_relay, with_resident
from .budgets import region1_budget
from .homes import home_bytes, panel_elems, panel_weights
from .matmul import enumerate_grids, stationary_weights
from .ring import with_rings


@dataclass(frozen=True)
class Candidate:
    strategy: tuple            # (op index, Grid) for every matmul
    cycles: int                # estimate of the body's cycles (plan/beam.py; rank-aligned: sum of standalone grids)
    resident: frozenset = frozenset()   # matmuls whose weights stay where read (expand/graph.py resident_weights)
    halves: frozenset = frozenset()     # LayerNorms laid in row halves on two tiles (policy.ln_halves, plan/lnhalves.py)

    @property
    def grids(self) -> dict:
        return dict(self.strategy)

    @property
    def stationary(self) -> bool:
        return bool(self.resident)

    @property
    def label(self) -> str:
        return " ".join(f"op{n}:{g.label}" + ("*" * (n in self.resident)) for n, g in self.strategy) \
            + (" stationary" if self.resident else "") \
            + (" halves:" + ",".join(f"op{n}" for n in sorted(self.halves)) if self.halves else "")


@dataclass
class PlanResult:
    candidates: list[Candidate] = field(default_factory=list)
    considered: int = 0
    rejected: dict = field(default_factory=dict)
    rejection: Rejection | None = None
    weights: dict = field(default_factory=dict)    # the best candidate's weight_modes
    family: dict = field(default_factory=dict)     # policy.pipeline_groups=auto: the priced plan families (compiler/family.py)

    def metrics(self) -> dict:
        return {"candidates": len(self.candidates), "considered": self.considered,
                "rejected": self.rejected,
                "best_cycles_estimate": self.candidates[0].cycles if self.candidates else None,
                "weights": self.weights, **({"family": self.family} if self.family else {})}


def weight_modes(g, cand: Candidate) -> dict:
    """Per matmul with a parameter weight: the weight, whether it stays resident where
    read or is gathered from its home each use, the grid, its replication (resident:
    the gm tiles holding each block) and resident bytes on each tile of the grid
    (member count × the padded block)."""
    count = g.repeat.count if g.repeat else 1
    seq = set(g.repeat.sequences) if g.repeat else set()
    out = {}
    for n, gr in cand.strategy:
        B = g.tensors[g.ops[n].inputs[1]]
        if B.kind != "param":
            continue
        still = n in cand.resident
        blk = (count if B.name in seq else 1) * -(-gr.kb * gr.nb * DTYPE_BYTES[B.dtype] // 16) * 16
        out[B.name] = {"mode": "resident" if still else "ring" if gr.ring else "homes", "grid": gr.label,
                       "replication": gr.gm if still else 0, "resident_bytes": blk if still else 0}
    return out


def matmul_options(g, n: int, target: Target, policy: Policy, homes: int, homes_r1: int = 0):
    """Feasible grids of matmul n, best standalone estimate first, the rejection
    counts, grids considered, and the grid nearest to fitting as (bytes, available
    bytes, where): its fullest tile, or what only region 1 can hold when that binds.
    `homes_r1`: home bytes only region 1 can hold (plan/matmul.py's region-1 screen)."""
    op = g.ops[n]
    A, B = (g.tensors[x] for x in op.inputs)
    G = len(op.attr("groups", ((0,) * 6,)))
    e = enumerate_grids(G, op.attr("m"), op.attr("k"), op.attr("n"), A.dtype, B.dtype,
                        bool(op.attr("transpose_b", False)), target, homes, policy.passes,
                        panel_elems(target, B.dtype), homes_r1, policy.f32_partials, bool(op.attr("normalise")))
    ok = e["reason"] == ""
    forced = policy.grid_dims
    if forced:   # a forced grid (gm, gn, gk, sp): every other grid is set aside (not counted as rejected)
        ok &= (e["gm"] == forced[0]) & (e["gn"] == forced[1]) & (e["gk"] == forced[2]) & (e["sp"] == forced[3])
    rejected = {"tiles": e["rejected_grid"]}
    for r in ("memory", "max_alloc"):
        rejected[r] = int((e["reason"] == r).sum())
    order = np.lexsort((e["gk"], e["gn"], e["gm"], e["gg"], e["mem"], e["cycles"]))  # deterministic
    order = order[ok[order]]
    opts = Options(n, {f: np.asarray(e[f][order], np.int64) for f in (*GRID_FIELDS, "recv", "rest", "recv_a", "b_blk")})
    region1 = target.region1_bytes
    over_mem, over_r1 = e["mem"] - target.tile_bytes, e["r1"] - region1
    lean = (0, target.tile_bytes, "on its fullest tile")
    if len(e["mem"]):
        i = int(np.argmin(np.maximum(over_mem, over_r1)))
        lean = ((int(e["mem"][i]), target.tile_bytes, "on its fullest tile") if over_mem[i] >= over_r1[i] else
                (int(e["r1"][i]), region1, "that only region 1 can hold (b, and buffers larger than region 0)"))
    return opts, rejected, len(e["mb"]) + e["rejected_grid"], lean


def stationary_counts(g, options: dict) -> dict:
    """Matmul -> member count of its weight, for the matmuls whose weights can stay put."""
    still = stationary_weights(g)
    count = g.repeat.count if g.repeat else 1
    return {n: count for n in options if g.ops[n].inputs[1] in still}


# Region-1 bytes resident weights may take (expand screens the exact figure)
resident_budget = region1_budget


# assumed: the support a full-size program's tiles hold (exchange tables up to the default
# policy.exchange_table_cap, 80 KiB = 5 elements of ipu21, and code); a constant, so that
# the plan does not depend on a key only expand reads
SUPPORT_ELEMENTS = 5


def residency(g, t: Target, counts: dict, base: int, shared: bool, policy: Policy) -> Residency:
    """The resident beam's per-tile budgets (plan/beam.py Residency): region 1 as
    resident_budget; the tile less the other inputs' and parameters' homes and
    SUPPORT_ELEMENTS of support (exchange tables and code); homes as
    averages over the tiles (count × bytes / tiles: expand rotates homes to balance;
    vectors are replicated shards, about tiles/2 × 256 B each: expand/graph.py
    vector_home). An estimate to prune with: expand and place decide exactly."""
    seq = set(g.repeat.sequences) if g.repeat else set()
    count = g.repeat.count if g.repeat else 1
    weights = {g.ops[n].inputs[1] for n in counts}

    def spread(x) -> int:
        size = max(x.nbytes, t.tiles // 2 * 256) if x.shape[0] == 1 and x.kind == "param" else x.nbytes
        return -(-size * (count if x.name in seq else 1) // t.tiles)
    fixed = sum(spread(x) for x in g.tensors.values() if x.kind in ("input", "param") and x.name not in weights)
    homes = {n: spread(g.tensors[g.ops[n].inputs[1]]) for n in counts}
    return Residency(counts, resident_budget(t), t.tile_bytes - fixed - SUPPORT_ELEMENTS * t.element_bytes,
                     homes, base, shared, policy.resident_replication)


def all_resident(cand: Candidate, every: frozenset, tiles: int, max_rep: int = 0) -> Candidate:
    """cand with every matmul of `every` resident (those whose grid's replication
    policy.resident_replication allows), their grids laid one after another around
    the tiles as plan's resident beam lays them (plan/beam.py)."""
    keep = frozenset(n for n, gr in cand.strategy if n in every and (not max_rep or gr.gm <= max_rep))
    cursor, out = 0, []
    for n, gr in cand.strategy:
        if n in keep:
            gr, cursor = replace(gr, rot=cursor), (cursor + gr.tiles) % tiles
        out.append((n, gr))
    return replace(cand, strategy=tuple(out), resident=keep)


def rank_aligned(options: dict, keep: int) -> list:
    """Candidate c: the c-th best standalone grid of every matmul (the beam's ablation)."""
    width = max((len(o) for o in options.values()), default=1)
    out = []
    for c in range(min(keep, width)):
        strat = tuple((n, min(c, len(o) - 1), 0) for n, o in options.items())
        out.append((sum(int(options[n].a["cycles"][i]) for n, i, _ in strat), strat))
    return out


def pricing_of(policy: Policy) -> Pricing:
    """The policy flags the beam's costs follow (beam.Pricing)."""
    return Pricing(policy.broadcast_sends, policy.row_calls, policy.ln_halves)


def support_reserve(t: Target) -> int:
    """Bytes of a tile the lean candidates leave for support (SUPPORT_ELEMENTS elements)."""
    return SUPPORT_ELEMENTS * t.element_bytes


def with_lean(g, target: Target, policy: Policy, homes: int, panels: dict, found: list, k: int,
              leanest: int, homes_r1: int = 0) -> list:
    """policy.lean_candidates: the grids' memory screen counts homes and the working set
    but not the support expand adds (code, exchange tables: ~50 KB of an ipu21 tile at
    27 layers), so when the best candidate's fullest grid leaves less than a reserve,
    every candidate may be one expand rejects for memory (a batch of images at full
    depth: the homes hold ~340 KB of every tile). Then the homes beam runs again over the
    grids that leave the reserve, and its best max(1, k // 4) states take the last places
    of the k: expand's exact screen and cycles choose. The reserve is support_reserve(),
    or less where some matmul's leanest grid (`leanest` bytes, the largest over the
    matmuls) would leave less (the tiny target's tiles are 192 KiB). Nothing changes when
    the best candidate leaves the reserve. The beam's screen of ring copies and whole-unit
    pieces (budgets.pruned) keeps the reserve too (beam_search `reserve`)."""
    reserve = min(support_reserve(target), target.tile_bytes - leanest)
    if not found or reserve <= 0:
        return found
    _, choice, opts = found[0]
    if max((int(opts[n].a["mem"][i]) for n, i, _ in choice), default=0) <= target.tile_bytes - reserve:
        return found
    lean = {}
    for n in opts:
        o = matmul_options(g, n, target, policy, homes + reserve, homes_r1)[0]
        o = with_relay(o) if policy.operand_relay and policy.plan_beam else o
        lean[n] = Options(o.op, {**o.a, "mem": o.a["mem"] - reserve})   # Grid.mem_bytes: without the reserve
    if policy.ring_homes and policy.plan_beam:
        lean = with_rings(g, lean, target, panels, policy.ring_copies, policy.ring_in_place,
                           policy.ring_units)
    more = [(*f, lean) for f in beam_search(g, target, lean, policy.plan_beam, max(1, k // 4), panels=panels,
                                                  pricing=pricing_of(policy), reserve=reserve)]
    grids = lambda f: tuple((n, f[2][n].grid(i).label, rot) for n, i, rot in f[1])
    seen = {grids(f) for f in found}
    more = [f for f in more if grids(f) not in seen]
    return sorted(found[:max(0, k - len(more))] + more, key=lambda f: f[0])


def plan(model, target: Target, policy: Policy) -> PlanResult:
    g = model.graph
    panels = panel_weights(g, target, policy.panel_homes)
    homes = home_bytes(g, target, panels, policy.vector_homes)
    homes_r1 = home_bytes(g, target, panels, policy.vector_homes, over=target.region0_bytes)
    options: dict[int, Options] = {}
    rejected, considered = Counter(), 0
    leanest = {}                   # matmul -> bytes of its leanest feasible grid
    for n, op in enumerate(g.ops):
        if op.kind != "matmul":
            continue
        opts, rej, cons, lean = matmul_options(g, n, target, policy, homes, homes_r1)
        rejected.update(rej)
        considered += cons
        if not len(opts):
            res = PlanResult([], considered, dict(rejected))
            need, avail, where = lean
            if policy.grid:
                res.rejection = Rejection("plan", "grid", f"op {n} ({op.outputs[0]}): policy.grid={policy.grid} "
                                          f"is not a feasible grid on {target.tiles} tiles (blocks must be "
                                          f"whole words, k blocks of an FP8 b whole {panel_elems(target, 'fp8') or '-'}-"
                                          f"row micro-panels, and the grid must fit)", {})
            else:
                res.rejection = Rejection(
                    "plan", "memory",
                    f"op {n} ({op.outputs[0]}): none of its {cons} tile grids (GMxGNxGK/SP splits) fits: the leanest needs {need} B "
                    f"{where}, {avail} B available (deficit {need - avail} B)",
                    {"tile": -1, "op": op.outputs[0], "live_bytes": need, "available_bytes": avail,
                     "deficit_bytes": max(0, need - avail)})
            return res
        options[n] = with_relay(opts) if policy.operand_relay and policy.plan_beam else opts
        leanest[n] = int(opts.a["mem"].min())
    if policy.ring_homes and policy.plan_beam:
        options = with_rings(g, options, target, panels, policy.ring_copies, policy.ring_in_place,
                           policy.ring_units)
    k = policy.plan_candidates
    if not policy.plan_beam:
        found = [(*f, options) for f in rank_aligned(options, k)]
    else:
        still = stationary_counts(g, options) if policy.weight_stationary else {}
        mixed = {n: with_resident(o) if n in still else o for n, o in options.items()}
        found, costs = [], Costs(g, target, mixed, panels, pricing_of(policy))
        for shared in (True, False) if still else ():     # proportional split, then first-come
            res = residency(g, target, still, homes, shared, policy)
            for f in beam_search(g, target, mixed, policy.plan_beam, max(1, k // 4), res, panels, costs):
                if any(mixed[n].a["still"][i] for n, i, _ in f[1] if n in still) and \
                        all(f[1] != h[1] for h in found):
                    found.append((*f, mixed))
        found += [(*f, options) for f in beam_search(g, target, options, policy.plan_beam, k - len(found),
                                                     panels=panels, pricing=pricing_of(policy))]
        found.sort(key=lambda f: f[0])                                      # stable: ties keep homes last
        if policy.lean_candidates:
            found = with_lean(g, target, policy, homes, panels, found, k, max(leanest.values(), default=0),
                              homes_r1)
        if policy.attn_variants:      # the attention matmuls' grids re-ranked in context (plan/attn.py)
            found = sorted(found + group_variants(g, target, found, policy.attn_variants, panels,
                                                          pricing_of(policy)),
                           key=lambda f: f[0])                               # stable: the beam's own first
    cands = [Candidate(tuple((n, replace(opts[n].grid(i), rot=rot)) for n, i, rot in choice), int(cyc),
                       frozenset(n for n, i, _ in choice if "still" in opts[n].a and opts[n].a["still"][i]),
                       replay_halves(g, target, opts, choice, panels, pricing_of(policy)))
             for cyc, choice, opts in found]
    res = PlanResult(cands, considered, dict(sorted(rejected.items())),
                     weights=weight_modes(g, cands[0]) if cands else {})
    if not cands:
        res.rejection = Rejection("plan", "unencodable", _unencodable(g, target, options, panels, policy.plan_beam), {})
    return res


def _unencodable(g, target: Target, options: dict, panels: dict, beam: int) -> str:
    """Why no state of the beam could gather its operands."""
    row_fed = sorted(g.ops[n].inputs[1] for n in options
                     if panel_elems(target, g.tensors[g.ops[n].inputs[1]].dtype) and g.ops[n].inputs[1] not in panels
                     and not g.ops[n].attr("transpose_b", False))
    if row_fed:
        return (f"{row_fed[0]} is stored row-major but its matmul reads AMP micro-panels: every gather would be a "
                f"byte-wise permutation (policy.panel_homes stores such weights in panel order)")
    return (f"no state of the beam (width {beam}) can gather its operands in whole 32-bit words (an FP8 tensor's "
            "blocks must start and end on a word); a wider policy.plan_beam may find one")
