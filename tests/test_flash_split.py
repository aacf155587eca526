"""FlashAttention with each head's keys split over tiles: forced grids of query
blocks × key splits on the tiny target, validated on the simulator against the numpy
reference; cycles measured = cycles predicted."""
import pytest

from compiler.expand import flash
from compiler.phases import compile_trial
from compiler.policy import Policy
from compiler.target import Target
from helpers import target_cfg

CASES = {   # name: (model, (query blocks, key splits))
    "odd-tokens-2x3": (dict(tokens=15, heads=2, head_dim=16, block=4), (2, 3)),
    "one-query-block-4-splits": (dict(tokens=16, heads=1, head_dim=8, block=8), (1, 4)),
    "three-heads-tiny-blocks": (dict(tokens=9, heads=3, head_dim=8, block=2), (3, 2)),
    "odd-tokens-multi-block-splits": (dict(tokens=31, heads=2, head_dim=16, block=4), (2, 5)),
    "uneven-slices": (dict(tokens=21, heads=2, head_dim=4, block=3), (3, 4)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forced_key_splits_validate(name, monkeypatch):
    model, grid = CASES[name]
    monkeypatch.setattr(flash, "choose_grid", lambda *a: grid)
    r = compile_trial(dict(model=dict(name="flash_attention", **model), target=target_cfg("tiny"), policy={}))
    assert r["report"].summary["status"] == "ok", (r["report"].summary, r["run"].metrics())
    tg = r["place"].tilegraph
    assert r["run"].cycles_per_step == [int(c) for c in tg.analysis["step_cycles"]] * tg.count
    assert r["run"].cycles == tg.analysis["cycles"]


def test_ipu21_grid_splits_keys():
    """So400m attention: the chosen grid splits keys (a tile no longer receives the whole
    head) because that is cheapest: its estimate is the least of every grid of the tiles
    (enumerated here, not by choose_grid), and below every grid that does not split."""
    t, p = Target.load("ipu21"), Policy()
    shape = (730, 16, 729, 72, 128)
    nq, ns = flash.choose_grid(t, p, *shape)
    assert ns > 1 and 16 * nq * ns <= t.tiles
    est = flash.estimate(t, p, *shape, nq, ns)
    every = {(q, s): e for q in range(1, t.tiles // 16 + 1) for s in range(1, t.tiles // 16 // q + 1)
             if (e := flash.estimate(t, p, *shape, q, s)) is not None}
    assert isinstance(est, int) and est > 0 and est == min(every.values())
    assert est < min(e for (q, s), e in every.items() if s == 1)
