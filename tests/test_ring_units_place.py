"""policy.ring_units on a tight tiny tile (#26): the 8-layer batch-4 tower of
tests/test_batch_plans.py with ring_units on. Its ring pieces read in place sit in one
pooled, bank-separated region-1 sequence per tile (90,112 B: 2.75 of region 1's four
element pairs), which owns whole pairs. Before the unit rules expand admitted the
candidate and placement spent > 7 CPU-minutes (greedy, searches, CP-SAT tile by tile)
on tiles it could not place. Now expand rejects it (its footprint counts the sequence in
whole units), and placing it anyway ends at the first tile, proved infeasible by the
place bound's own unit rule (no code shared with expand's screen). Plan no longer hands it
over (its estimate counts the padding, tests/test_unit_padding.py): taken from the old estimate."""
from __future__ import annotations

import numpy as np

from compiler import mapper as mappers
from compiler.expand import expand_one
from compiler.expand.analysis import analyse, profile_bytes, unit_waste
from compiler.expand.graph import expand_graph
from compiler.phases import policy_of, run_phase, target_of
from compiler.place import INFEASIBLE, PLACED, PlaceConfig, Problem, bound, validate
from compiler.place.instance import Instance
from compiler.place.phase import place_finalist, solve_chunk, tile_problems
from compiler.plan.ring import copied, in_units, uncopied
from test_batch_plans import _cfg
from test_unit_padding import old_estimate


def _units_candidate():
    # ln_halves off: the case was found (and is tight) with whole-row LayerNorms
    cfg = _cfg(dict(weight_stationary=False, broadcast_sends=False, ring_units=True, ln_halves=False), layers=8, batch=4)
    res = {"model": run_phase("model", {}, cfg)}
    with old_estimate():     # plan now refuses it (tests/test_unit_padding.py)
        res["plan"] = run_phase("plan", res, cfg)
    t, pol = target_of(cfg), policy_of(cfg)
    # the candidate expand admitted before the unit rules: the best copied units
    # candidate's twin with each piece held once
    cand = next(uncopied(c) for c in res["plan"].candidates if copied(c) and in_units(c))
    return res["model"].graph, cand, t, pol


def test_pooled_pieces_rejected_by_expand_and_proved_by_the_place_bound():
    g, cand, t, pol = _units_candidate()
    e = expand_one(cand, g, t, pol)
    assert e.reason == "memory" and "in whole units" in e.message, e.message
    tg = expand_graph(g, cand.grids, t, pol, cand.label, cand.resident)
    a = analyse(tg, t)
    region0_free = t.region0_bytes - a["code_bytes"] - a["table_bytes"]
    w = unit_waste(tg, t, region0_free, profile_bytes(tg))
    pooled = np.asarray(tg.names)[tg.req["name"][w > 0]].astype(str)
    assert len(pooled) and set(pooled) == {"weights.ring"}
    tg.analysis = a
    # placed anyway: the first failing tile (in tile order) ends its chunk, proved at once
    support, addr, counts, worst, _, _ = place_finalist(tg, t, PlaceConfig(), mappers.serial)
    tile, s = worst
    assert s.status == INFEASIBLE and s.method == "bound-live-units" and s.deficit > 0
    assert counts["failed"] == 1 and counts["skipped"] == t.tiles - 1 - tile, (tile, dict(counts))
    # the place bound's unit rule is what proves it: zero waste and the bound passes it
    p = tile_problems(tg, support, t)[0][tile]
    assert bound.prove(Instance(p)).kind == "live-units"
    real = bound.unit_waste
    try:
        bound.unit_waste = lambda inst: tuple(np.zeros_like(x) for x in real(inst))
        assert bound.prove(Instance(p)) is None
    finally:
        bound.unit_waste = real


def _one(size):
    """One 16-aligned buffer on a 2 KiB single-region tile."""
    return Problem(memory_base=0, region0_end=2048, memory_end=2048, element_bytes=1024,
                   size=np.array([size]), align=np.array([16]), start=np.array([0]), end=np.array([1]),
                   region=np.array([0]))


def test_stop_at_failure_ends_a_chunk_at_its_first_failed_tile():
    """solve_chunk with the flag (the default) returns the solutions up to the first
    failed problem; without it, every problem's."""
    probs = [_one(1024), _one(4096), _one(512)]
    on = solve_chunk(probs, PlaceConfig())
    off = solve_chunk(probs, PlaceConfig(stop_at_failure=False))
    assert [s.status for s in on] == [PLACED, INFEASIBLE]
    assert [s.status for s in off] == [PLACED, INFEASIBLE, PLACED]
    assert validate(probs[2], off[2].addr) == []
