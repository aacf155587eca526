"""expand: candidates -> tile graphs, analysed and screened in bounded batches,
keeping only the placement shortlist (docs/architecture.md §3).

Candidates keep each weight in homes gathered by its matmul, or resident where it is
read (weight-stationary: no exchange, count × the blocks in memory). With
policy.weight_stationary each homes candidate is also expanded with every weight
resident (plan's beam splits region 1 between the weights by a fixed rule, so grids it
passes over may still fit); the exact cycles and the memory screen choose, so shallow
models keep weights still and deep ones keep some or all in homes."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from .. import mapper as mappers
from ..plan import all_resident
from ..plan.matmul import stationary_weights
from ..plan.ring import concentrated, copied, in_units, uncopied, unringed, word_cut
from ..policy import Policy
from ..result import Rejection
from ..target import Target
from .analysis import analyse
from .graph import expand_graph
from .layout import Unencodable
from .lifetimes import lifetime_faults
from .matmul import resident_blocks, resident_stationary
from .tilegraph import TileGraph


@dataclass
class Expanded:
    candidate: object
    tilegraph: TileGraph | None
    analysis: dict
    reason: str = ""           # "" when admitted
    message: str = ""
    figures: dict = field(default_factory=dict)
    op_cycles: dict = field(default_factory=dict)   # op index -> cycles of the supersteps it opened


def expand_one(cand, graph, target: Target, policy: Policy) -> Expanded:
    if cand.resident:
        over = resident_over(cand, graph, target)
        if over is not None:
            return over
    try:
        tg = expand_graph(graph, cand.grids, target, policy, cand.label, cand.resident, cand.halves)
    except Unencodable as e:             # a byte-wise permutation: rejected before any analysis
        return Expanded(cand, None, {}, "unencodable", str(e))
    bad = lifetime_faults(tg)                # a compiler bug, not a plan's limit: stop
    if bad:
        raise RuntimeError(f"expand {cand.label}: requests touched outside their lifetime: " + "; ".join(bad))
    a = analyse(tg, target)
    op_cycles = {}
    for op, c in zip(tg.step_op, a["step_cycles"]):
        op_cycles[op] = op_cycles.get(op, 0) + int(c)
    w = a["worst_tile"]
    tbl = int(a["table_bytes"].max())
    if a["unencodable"]:
        return Expanded(cand, None, a, "unencodable", a["unencodable"])
    if tbl > policy.exchange_table_cap:
        t, cap = int(a["table_bytes"].argmax()), policy.exchange_table_cap
        return Expanded(cand, None, a, "exchange_table_cap",
                        f"tile {t}: exchange table {tbl} B over the {cap} B cap (excess {tbl - cap} B)",
                        dict(tile=t, live_bytes=tbl, available_bytes=cap, deficit_bytes=tbl - cap))
    if a["footprint_bytes"][w] > target.tile_bytes:
        return _over_tile(cand, a, target, w, int(a["footprint_bytes"][w]), int(a["peak_event"][w]), "")
    if a["units_footprint"] is not None and a["units_footprint"][0].max() > target.tile_bytes:
        uf, uev = a["units_footprint"]          # bank-separated sequences in whole units (analysis.unit_waste)
        w = int(uf.argmax())
        return _over_tile(cand, a, target, w, int(uf[w]), int(uev[w]),
                          " counting bank-separated sequences in whole units")
    il, r1 = a["region1_live_bytes"], a["region1_bytes"]
    if il.max() > r1:
        w = int(il.argmax())
        return Expanded(cand, None, a, "memory",
                        f"tile {w}: {int(il[w])} B live that only region 1 can hold (interleaved operands, buffers "
                        f"larger than region 0's free bytes), region 1 holds {r1} B (deficit {int(il[w]) - r1} B)",
                        dict(tile=w, live_bytes=int(il[w]), available_bytes=r1, deficit_bytes=int(il[w]) - r1))
    tg.analysis = a
    return Expanded(cand, tg, a, op_cycles=op_cycles)


def resident_floor(cand, graph, target: Target) -> np.ndarray:
    """Every tile's bytes of resident weight blocks, count members of them (int64[tiles])."""
    _, used = resident_blocks(graph, resident_stationary(graph, cand.resident), cand.grids, target.tiles)
    return used * (graph.repeat.count if graph.repeat else 1)


def resident_over(cand, graph, target: Target) -> Expanded | None:
    """Rejected for memory before the tile graph is built, where one tile's resident weight
    blocks alone (their request lives all the program: count members of its bytes at least)
    outgrow the tile: every weight resident at 27 layers needs ~2.2 tiles' bytes, and
    expanding such a candidate only to find that costs about a second. A lower bound of
    the footprint analyse() counts, so it rejects nothing that screen admits."""
    need = resident_floor(cand, graph, target)
    w = int(need.argmax())
    if need[w] <= target.tile_bytes:
        return None
    over = int(need[w]) - target.tile_bytes
    return Expanded(cand, None, {}, "memory",
                    f"tile {w}: {int(need[w])} B of resident weights alone, {target.tile_bytes} B available "
                    f"(deficit {over} B)",
                    dict(tile=w, live_bytes=int(need[w]), available_bytes=target.tile_bytes, deficit_bytes=over))


def without_graph(e: Expanded) -> Expanded:
    """What a caching mapper stores of a candidate: everything but its tile graph (~60 MB at
    27 layers, 1 GB a trial), which only finalists need and expanding again rebuilds."""
    return replace(e, tilegraph=None)


def with_graph(e: Expanded, shared: dict) -> Expanded:
    """An admitted candidate read back without its tile graph (without_graph), expanded again:
    the same analysis, as expansion is a function of the candidate and `shared`."""
    if e.reason or e.tilegraph is not None:
        return e
    again = expand_one(e.candidate, **shared)
    if again.reason or again.analysis["cycles"] != e.analysis["cycles"]:      # a compiler bug: stop
        raise RuntimeError(f"expand {e.candidate.label}: expanded again, {again.reason or again.analysis['cycles']} "
                           f"where the stored result says {e.analysis['cycles']} cycles")
    return again


def _over_tile(cand, a, target: Target, w: int, need: int, ev: int, how: str) -> Expanded:
    """Rejected for memory: tile w's `need` live bytes at event ev (with support) over the tile."""
    over = need - target.tile_bytes
    return Expanded(cand, None, a, "memory",
                    f"tile {w}: {need} B live at event {ev}{how} (with support), "
                    f"{target.tile_bytes} B available (deficit {over} B)",
                    dict(tile=w, event=ev, live_bytes=need, available_bytes=target.tile_bytes, deficit_bytes=over))


@dataclass
class ExpandResult:
    finalists: list[Expanded] = field(default_factory=list)
    screened: int = 0
    rejected: dict = field(default_factory=dict)
    rejection: Rejection | None = None

    def metrics(self) -> dict:
        best = self.finalists[0].analysis if self.finalists else None
        tg = self.finalists[0].tilegraph if self.finalists else None
        return {"finalists": len(self.finalists), "screened": self.screened, "rejected": self.rejected,
                "exchange_table_max_bytes": int(best["table_bytes"].max()) if best else None,
                "code_max_bytes": int(best["code_bytes"].max()) if best else None,
                "cycles": best["cycles"] if best else None,
                **({"pipeline_tiles": list(tg.group_tiles)} if getattr(tg, "group_tiles", ()) else {})}


def grid_shape(cand) -> tuple:
    """Every matmul's grid dimensions (GMxGNxGK/SP per op): what a candidate's tiles hold
    and when, whatever its weights' homes (ring, resident), rotation or relay."""
    return tuple((n, g.gg, g.gm, g.gn, g.gk, g.sp) for n, g in cand.strategy)


def alike_retry(short: list, other: list) -> list:
    """policy.diverse_finalists: when every finalist (and the homes fallback) has one grid
    shape, the best admitted candidate of another shape (`other`: keep_distinct's best of
    the two best shapes), placed last. Expand's screens count live bytes (and what only
    region 1 can hold), not fragmentation over time or bank separation, so one shape's
    twins (homes, ring, resident) may fail placement together: before the region-1 screen
    counted buffers region 0 cannot hold, the 2560x1024x64 f16 GEMM's finalists and
    fallback were all 8x2x4/2 and placement rejected the trial (tests/test_serial_passes.py)."""
    if not short or len({grid_shape(e.candidate) for e in short}) > 1:
        return []
    one = grid_shape(short[0].candidate)
    return [e for _, kk, e in other if kk != one][:1]


def compose(cands: list, costs: dict):
    """The candidate taking, for every matmul, the grid whose supersteps measured
    cheapest among the admitted candidates (plan's estimates rank grids per op; the
    exact figures may disagree). None when it is one of them already or nothing to mix."""
    if len(costs) < 2:
        return None
    grids = []
    for n, _ in cands[0].strategy:
        i = min(costs, key=lambda i: (costs[i].get(n, float("inf")), i))
        grids.append((n, cands[i].grids[n]))
    strategy = tuple(grids)
    if any(c.strategy == strategy for c in cands):
        return None
    return replace(cands[0], strategy=strategy, cycles=sum(g.cycles for _, g in strategy))


def expand(model, plan_res, target: Target, policy: Policy, mapper=mappers.serial) -> ExpandResult:
    if plan_res.rejection:
        return ExpandResult(rejection=plan_res.rejection)
    cands = list(plan_res.candidates)
    if cands and concentrated(cands[0]) and not cands[0].resident:    # its plain-homes twin: a fallback
        twin = unringed(cands[0])
        cands += [twin] if all(twin.strategy != c.strategy for c in cands) else []
    for twin in [uncopied(c) for c in cands if copied(c)][:1]:  # ring copies priced on plan's estimate: the
        if all(twin.strategy != c.strategy for c in cands):       # best copied candidate's twin, pieces once
            cands.append(twin)
    for twin in [word_cut(c) for c in cands if in_units(c)][:1]:  # 2-D unit pieces (policy.ring_units), too:
        if all(twin.strategy != c.strategy for c in cands):       # the best one's twin with copying rings
            cands.append(twin)
    still = stationary_weights(model.graph)
    every = frozenset(n for n, op in enumerate(model.graph.ops) if op.kind == "matmul" and op.inputs[1] in still)
    if policy.weight_stationary and every:
        seen = {(c.strategy, c.resident) for c in cands}
        more = [all_resident(c, every, target.tiles, policy.resident_replication)
                for c in plan_res.candidates if not c.resident]
        cands += [c for c in more if c.resident and (c.strategy, c.resident) not in seen]
    keep = mappers.keep_best(policy.finalists, lambda e: e.analysis["cycles"] if not e.reason else None)
    failures = Counter()
    first_failure = {}

    costs = {}                                   # admitted candidate -> its per-op cycles
    # fallback: the best homes candidate, placed if every finalist with resident weights or
    # ring homes fails placement (expand screens their memory, placement alone proves it)
    homes = mappers.keep_best(1, lambda e: None if e.reason or concentrated(e.candidate) else e.analysis["cycles"])
    fallback = []
    # policy.diverse_finalists: the best admitted candidate of the two best grid shapes
    shapes = mappers.keep_distinct(2, lambda e: e.analysis["cycles"] if not e.reason else None,
                                   lambda e: grid_shape(e.candidate))
    other = []

    def reduce(acc, i, e: Expanded):
        if e.reason:
            failures[e.reason] += 1
            first_failure[e.reason] = min(first_failure.get(e.reason, (i, e)), (i, e), key=lambda p: p[0])
        else:
            costs[i] = e.op_cycles
        fallback[:] = homes(fallback, i, e)
        other[:] = shapes(other, i, e) if policy.diverse_finalists else ()
        return keep(acc, i, e)

    shared = dict(graph=model.graph, target=target, policy=policy)
    best = mapper("expand", expand_one, cands, reduce, [], shared, stored=without_graph)
    n = len(cands)
    for st in sorted({c.resident for c in cands}, key=sorted) if policy.compose_candidates else ():  # per mode
        ids = [i for i, c in enumerate(cands) if c.resident == st]
        composed = compose([cands[i] for i in ids], {ids.index(i): costs[i] for i in ids if i in costs})
        if composed is not None:
            best = reduce(best, n, expand_one(composed, **shared))
            n += 1
    short = [e for _, e in best]
    if short and all(concentrated(e.candidate) for e in short):
        short += [e for _, e in fallback]
    short += alike_retry(short, other)
    short = [with_graph(e, shared) for e in short]
    res = ExpandResult(short, n, dict(sorted(failures.items())))
    if not res.finalists:
        reason = max(failures, key=lambda r: (failures[r], r))
        first = first_failure[reason][1]
        res.rejection = Rejection("expand", reason, f"all {n} candidates rejected; "
                                  f"best-ranked: {first.message}", first.figures)
    return res
