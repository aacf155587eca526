"""expand's resident screen (compiler/expand/__init__.py resident_over): a candidate whose
resident weight blocks alone outgrow a tile is rejected before its tile graph is built. The
screen's bytes must be a lower bound of the footprint the full analysis counts on every tile
(analyse: live bytes from the tile graph's requests, plus support), so it never rejects a
candidate expand would admit; checked on every all-resident candidate of a tiny ViT at
depths where they fit and where they do not."""
from __future__ import annotations

import numpy as np

from compiler.expand import expand_one, resident_floor
from compiler.expand.analysis import analyse
from compiler.expand.graph import expand_graph
from compiler.phases import policy_of, run_phase, target_of
from compiler.plan import all_resident
from compiler.plan.matmul import stationary_weights
from test_batch_plans import _cfg


def _resident_candidates(layers: int):
    cfg = _cfg({}, layers=layers, width=128, hidden=512)
    res = {"model": run_phase("model", {}, cfg)}
    res["plan"] = run_phase("plan", res, cfg)
    g, t = res["model"].graph, target_of(cfg)
    still = stationary_weights(g)
    every = frozenset(n for n, op in enumerate(g.ops) if op.kind == "matmul" and op.inputs[1] in still)
    cands = [all_resident(c, every, t.tiles) for c in res["plan"].candidates if not c.resident]
    return g, t, policy_of(cfg), [c for c in cands if c.resident]


def test_the_resident_screen_bounds_the_footprint_from_below():
    screened = admitted = 0
    for layers in (1, 34):
        g, t, pol, cands = _resident_candidates(layers)
        assert cands, layers
        for c in cands[:4]:
            need = resident_floor(c, g, t)
            tg = expand_graph(g, c.grids, t, pol, c.label, c.resident)
            a = analyse(tg, t)
            assert (need <= a["footprint_bytes"]).all(), (layers, c.label)
            r = tg.req                                # and it counts the whole request: count members
            own = np.asarray(tg.names)[r["name"]] == "weights.resident"
            held = np.bincount(r["tile"][own], (r["count"] * r["size"])[own], minlength=t.tiles)
            assert (need == held).all(), (layers, c.label)
            e = expand_one(c, g, t, pol)
            if need.max() > t.tile_bytes:
                screened += 1
                assert e.reason == "memory" and "resident weights alone" in e.message
                assert a["footprint_bytes"].max() > t.tile_bytes     # the full screen agrees
            else:
                admitted += not e.reason
    assert screened and admitted, (screened, admitted)
