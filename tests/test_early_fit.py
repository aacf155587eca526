"""policy.early_fit (expand/early.py): early gathers take a move only where every tile it
lengthens a buffer on stays within the tile by the footprint screen's figures (a tile over
already may not grow). Checked on a real tile graph (a tiny 1-layer ViT on the tiny
target), the moves run on copies of the graph before any move: with room to spare fit
changes nothing. The tiny graphs' moves never lengthen a buffer through a tile's peak, so
one more request (64 KiB) is injected on a tile a move lengthens a buffer on, live exactly
where it is lengthened; with the tile one byte short of what that move makes of it, the
moves without fit overfill some tile, those with fit none, and some still move. "Overfill" by the figures fit judges by: expand's live peak after
the moves plus the support (code, tables, profile) before them: moving transfers between
steps may also change a tile's exchange table by a few entries, which fit does not foresee
(32 B on one tile here) and expand's screen still checks."""
from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

import compiler.expand.graph as G
from compiler.expand.analysis import live_peak, support_bytes
from compiler.expand.early import early_gathers
from compiler.phases import policy_of, run_phase, target_of
from test_batch_plans import _cfg


def _before_moves():
    """The best candidate's tile graph and movable gathers as expand hands them to
    early_gathers, unmoved."""
    cfg = _cfg({}, layers=1, width=128, hidden=512)
    res = {"model": run_phase("model", {}, cfg)}
    res["plan"] = run_phase("plan", res, cfg)
    seen = []
    real = G.early_gathers
    G.early_gathers = lambda tg, movable, t, fit=False: seen.append((copy.deepcopy(tg), list(movable)))
    try:
        c = res["plan"].candidates[0]
        G.expand_graph(res["model"].graph, c.grids, target_of(cfg), policy_of(cfg), c.label, c.resident)
    finally:
        G.early_gathers = real
    return seen[0], target_of(cfg)


def _footprint(tg, support=None):
    return live_peak(tg)[0] + (support_bytes(tg) if support is None else support)


def test_early_fit_keeps_every_move_that_fits_and_none_that_does_not():
    (tg0, movable), t = _before_moves()
    run = lambda t, fit: (lambda tg: (early_gathers(tg, movable, t, fit), tg))(copy.deepcopy(tg0))
    n_off, off = run(t, False)
    n_on, on = run(t, True)
    assert n_off > 0
    assert n_on == n_off and np.array_equal(on.xfer["step"], off.xfer["step"])   # room to spare
    moved = [m for m in movable if off.xfer["step"][m[0]] != tg0.xfer["step"][m[0]]]
    r0, r1, dst, step, ready = moved[0]
    y = int(off.xfer["step"][r0])
    d = dst[tg0.req["start"][dst] > y][0]
    extra = dict(zip(tg0.req, (np.array([v[d]]) for v in tg0.req.values())))
    extra.update(size=np.array([64 << 10]), start=np.array([y]), end=tg0.req["start"][[d]], count=np.array([1]),
                 stride=np.array([0]))
    tg0.req = {k: np.concatenate([v, extra[k]]) for k, v in tg0.req.items()}
    support = support_bytes(tg0)
    n_off, off = run(t, False)
    before, after = _footprint(tg0, support), _footprint(off, support)
    raised = np.flatnonzero(after > before)
    assert len(raised), "the moves raise some tile's live peak"
    limit = int(after[raised].max() - 1)                 # that tile's moves do not all fit
    small = replace(t, memory_end=t.memory_base + limit)
    assert small.tile_bytes == limit
    allowed = np.maximum(limit, before)                  # a tile over already: no worse
    n_off, off = run(small, False)
    n_on, on = run(small, True)
    assert (_footprint(off, support) > allowed).any()
    assert (_footprint(on, support) <= allowed).all()
    assert 0 < n_on <= n_off and not np.array_equal(on.xfer["step"], off.xfer["step"])
