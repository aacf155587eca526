"""Resident weights at depth: the beam budgets resident bytes per tile, laying resident
grids one after another around the tiles (Grid.rot), so a weight stack that piles past
the budget on tile 0 still fits when spread; expand places the blocks where the plan
says; a stack too deep for any spreading stays in homes.

The model: a Repeat of y = GELU(x·W1)·W2 on the tiny target (64 tiles, resident
budget plan.resident_budget = 64 KiB of region 1's 128 KiB), both 256 × 256 FP8 weights
forced onto 1x2x4 grids (8 tiles each, an 8 KiB block per tile and member): R members
of both on the same 8 tiles need 2·R·8 KiB, spread over 16 tiles R·8 KiB."""
import numpy as np

from compiler.phases import compile_trial, model_phase, policy_of, target_of
from compiler.plan import plan, resident_budget, weight_modes
from helpers import target_cfg

BLOCK = 128 * 64          # a 1x2x4 grid's block of a 256 × 256 FP8 weight: kb 64 × nb 128


def cfg(repeat: int, **policy):
    return dict(model=dict(name="mlp", tokens=16, width=256, hidden=256, weight_dtype="fp8", repeat=repeat),
                target=target_cfg("tiny"), policy=dict(grid="1x2x4", **policy))


def resident_per_tile(tg) -> np.ndarray:
    """Bytes of the resident-weights request on each tile, from the tile graph itself."""
    r = tg.req
    sel = np.array([tg.names[k] == "weights.resident" for k in r["name"]], bool)
    per = np.where(r["count"][sel] > 1, r["stride"][sel] * r["count"][sel], r["size"][sel])
    return np.bincount(r["tile"][sel], per, minlength=tg.tiles)


def test_weights_that_fit_only_spread_stay_resident_and_validate():
    R = 6
    c = cfg(R)
    t = target_of(c)
    assert 2 * R * BLOCK > resident_budget(t) >= R * BLOCK     # stacked on 8 tiles: no; spread: yes
    p = plan(model_phase(c), t, policy_of(c))
    best = p.candidates[0]
    assert best.resident == {0, 2}
    assert sorted(g.rot for _, g in best.strategy) == [0, 8]   # the second grid starts where the first ends
    assert {w["mode"] for w in p.metrics()["weights"].values()} == {"resident"}
    r = compile_trial(c)
    fin = r["expand"].finalists[r["place"].placement.finalist]
    assert fin.candidate.resident == {0, 2}
    assert r["run"].metrics()["validated"]
    per = resident_per_tile(fin.tilegraph)
    assert (per[:16] >= R * BLOCK).all() and not per[16:].any()    # on the plan's 16 tiles, none doubled
    assert per.max() <= resident_budget(t) + 2 * t.element_bytes
    modes = weight_modes(r["model"].graph, fin.candidate)
    assert [m["resident_bytes"] for m in modes.values()] == [R * BLOCK] * 2
    assert [m["replication"] for m in modes.values()] == [1, 1]


def test_stacked_on_the_same_tiles_the_same_weights_do_not_fit_the_budget():
    """The fault the spreading fixes, injected: every grid from tile 0 (as before),
    the fullest tile holds both stacks, over the budget."""
    R = 6
    c = cfg(R)
    t = target_of(c)
    best = plan(model_phase(c), t, policy_of(c)).candidates[0]
    held = np.zeros(t.tiles, np.int64)
    for n, g in best.strategy:
        held[:g.tiles] += R * BLOCK
    assert held.max() > resident_budget(t)


def test_too_deep_to_spread_keeps_weights_in_homes():
    R = 17                                                     # R·8 KiB > region 1's 128 KiB
    c = cfg(R)
    t = target_of(c)
    assert R * BLOCK > t.memory_end - t.region0_end
    p = plan(model_phase(c), t, policy_of(c))
    assert not any(k.resident for k in p.candidates)
    assert {w["mode"] for w in p.metrics()["weights"].values()} <= {"homes", "ring"}   # ring: one copy, on its grid
    r = compile_trial(c)
    fin = r["expand"].finalists[r["place"].placement.finalist]
    assert not fin.candidate.resident and r["run"].metrics()["validated"]


def test_replication_cap_keeps_replicated_grids_in_homes():
    """policy.resident_replication = 1: a grid splitting the rows (gm = 2: every block on
    two tiles) may not keep its weight resident."""
    c = cfg(2, resident_replication=1)
    c["policy"]["grid"] = "2x2x4"
    p = plan(model_phase(c), target_of(c), policy_of(c))
    assert p.candidates and not any(k.resident for k in p.candidates)
    c["policy"]["resident_replication"] = 2
    assert any(k.resident for k in plan(model_phase(c), target_of(c), policy_of(c)).candidates)
