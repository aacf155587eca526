"""policy.split_gathers (compiler/expand/split.py): a gather's transfers spread over
earlier exchange steps where their tiles have room; and expand's lifetime check
(compiler/expand/lifetimes.py), which must catch a moved transfer whose destination
buffer does not live from its new step."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.expand import graph as ex_graph
from compiler.expand.lifetimes import lifetime_faults
from compiler.phases import compile_trial
from helpers import target_cfg, trial_ok as ok

# the tiny tower of test_ring_homes (weights in ring homes); sends charged per receiver and
# no whole-gather moves first: its exchange steps then leave room that split_gathers uses
VIT = dict(name="vit", preset="custom", width=128, hidden=256, heads=2, tokens=16, layers=2)


def cfg(**policy):
    """One plan candidate, one finalist: the same plan with the split on and off."""
    return dict(model=dict(VIT), target=target_cfg("tiny"),
                policy=dict(dict(weight_stationary=False, broadcast_sends=False, early_gathers=False,
                                 plan_candidates=1, finalists=1, compose_candidates=False, attn_variants=0), **policy))


def test_split_moves_transfers_validated_and_not_longer():
    on, off = compile_trial(cfg(split_gathers=True)), compile_trial(cfg(split_gathers=False))
    assert ok(on) and ok(off)                       # read-back, exchange check, expand's cycles = the simulator's
    tg_on, tg_off = (r["expand"].finalists[0].tilegraph for r in (on, off))
    assert tg_on.label == tg_off.label, "same plan: the split alone differs"
    moved = tg_on.xfer["step"] != tg_off.xfer["step"]
    assert moved.any(), "no transfer moved"
    assert (tg_on.xfer["step"][moved] < tg_off.xfer["step"][moved]).all(), "only earlier"
    assert on["run"].metrics()["cycles"] <= off["run"].metrics()["cycles"]
    assert not lifetime_faults(tg_on)


def test_split_after_early_gathers_with_multicast_validated():
    """The defaults (early gathers, multicast sends) with the split on: a multicast group
    moves whole or not at all."""
    r = compile_trial(dict(model=dict(VIT), target=target_cfg("tiny"),
                           policy=dict(weight_stationary=False, split_gathers=True)))
    assert ok(r)


def test_a_split_whose_buffer_starts_late_is_caught(monkeypatch):
    """Injected fault: the split moves transfers but leaves their destination buffers'
    lifetime starts where they were; expand's lifetime check must stop the trial."""
    real = ex_graph.split_gathers

    def late(tg, movable, t):
        start = tg.req["start"].copy()
        n = real(tg, movable, t)
        assert n
        tg.req["start"][:] = start
        return n

    monkeypatch.setattr(ex_graph, "split_gathers", late)
    with pytest.raises(RuntimeError, match="outside their lifetime"):
        compile_trial(cfg(split_gathers=True))


def test_lifetime_faults_on_a_valid_graph_and_each_kind_of_fault():
    tg = compile_trial(cfg())["expand"].finalists[0].tilegraph
    assert lifetime_faults(tg) == []
    x, k = tg.xfer, tg.kern
    for table, col, step in ((x, "dreq", x["step"]), (x, "sreq", x["step"]), (k, "r2", k["step"])):
        i = int(np.flatnonzero(table[col] >= 0)[0])
        q = int(table[col][i])
        keep = int(tg.req["start"][q]), int(tg.req["end"][q])
        tg.req["start"][q] = int(step[i]) + 1                 # starts after it is touched
        assert lifetime_faults(tg), (col, "late start")
        tg.req["start"][q], tg.req["end"][q] = keep[0], int(step[i]) - 1   # ends before
        assert lifetime_faults(tg), (col, "early end")
        tg.req["start"][q], tg.req["end"][q] = keep
    assert lifetime_faults(tg) == []
