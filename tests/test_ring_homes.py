"""policy.ring_homes (compiler/plan/ring.py, compiler/expand/ring.py) and
policy.early_gathers (compiler/expand/early.py): weights homed on their matmul's grid
in pieces passed between the tiles that read them; B gathers moved to earlier exchange
steps with room. Chosen by cost, validated by read-back and the exchange check like
every plan, cheaper than without, and broken versions must be caught."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.expand import graph as ex_graph
from compiler.expand import ring as ex_ring
from compiler.phases import compile_trial
from compiler.plan.ring import _pieces, ring_starts
from helpers import target_cfg, trial_ok as ok

# 16 tokens on 64 tiles, weights in homes (weight_stationary off: the depth case)
VIT = dict(name="vit", preset="custom", width=128, hidden=256, heads=2, tokens=16, layers=2)


def cfg(fp8: bool = False, **policy):
    return dict(model=dict(VIT, fp8_activations=fp8), target=target_cfg("tiny"),
                policy=dict(dict(weight_stationary=False), **policy))


def ringed(r) -> list[str]:
    return [g.label for _, g in r["expand"].finalists[0].candidate.strategy if g.ring]


@pytest.mark.parametrize("fp8", [False, True])
def test_ring_chosen_validated_and_cheaper(fp8):
    """Also with FP8 activations; the tiny ViT's weights are FP8 (micro-panel pieces)."""
    on = compile_trial(cfg(fp8, early_gathers=False))
    off = compile_trial(cfg(fp8, early_gathers=False, ring_homes=False))
    assert ringed(on), "the tiny ViT should home some weight on its grid"
    assert not ringed(off)
    assert ok(on) and ok(off)
    assert on["run"].metrics()["cycles"] < off["run"].metrics()["cycles"]
    w = on["plan"].metrics()["weights"]
    assert "ring" in {v["mode"] for v in w.values()}


def test_early_gathers_validated_and_cheaper():
    # sends charged per receiver: with broadcast sends this tiny tower's exchange steps
    # leave no gather a cheaper earlier step to move to
    on, off = (compile_trial(cfg(broadcast_sends=False, **p)) for p in ({}, {"early_gathers": False}))
    assert ok(on) and ok(off)
    tg_on, tg_off = (r["expand"].finalists[0].tilegraph for r in (on, off))
    assert not np.array_equal(tg_on.xfer["step"], tg_off.xfer["step"]), "no gather moved"
    assert on["run"].metrics()["cycles"] < off["run"].metrics()["cycles"]


@pytest.mark.parametrize("width,gm,q", [(64, 9, 1), (64, 3, 1), (10, 4, 2), (7, 3, 2), (1, 5, 2), (160, 27, 1),
                                        (128, 1, 1), (6, 6, 4)])
def test_pieces_partition_the_block(width, gm, q):
    """Brute force: every column of the block in exactly one piece, at most gm pieces,
    piece edges on multiples of q, and _pieces' largest / smallest as counted."""
    st = ring_starts(width, gm, q)
    widths = np.diff(np.append(st, width))
    assert st[0] == 0 and (widths > 0).all() and widths.sum() == width and len(st) <= gm
    assert (st % q == 0).all()
    big, n, small = (int(v) for v in _pieces(width, gm, q))
    assert n == len(st) and big >= widths.max() and small <= widths.min()


def test_a_ring_without_its_local_copies_is_caught(monkeypatch):
    """Injected fault: the tiles' own pieces are never copied into the operand buffer
    (only the peers' pieces arrive); read-back must fail."""
    real = ex_ring.local_pieces

    def no_copies(c, first):
        n = len(c.bld.kern)
        real(c, first)
        del c.bld.kern[n:], c.bld.scale[n:]

    monkeypatch.setattr(ex_ring, "local_pieces", no_copies)
    from compiler.expand import matmul as ex_matmul
    monkeypatch.setattr(ex_matmul, "local_pieces", no_copies)
    r = compile_trial(cfg(early_gathers=False, ring_in_place=False, ring_units=False))   # in place: no copies
    assert ringed(r)
    assert not r["run"].metrics()["validated"]


def test_a_gather_moved_before_its_source_is_ready_is_caught(monkeypatch):
    """Injected fault: every activation B gather (k, v) moves to the exchange step just
    before its producer completes, so it sends the previous iteration's (or unwritten)
    bytes; read-back must fail."""
    def too_early(tg, movable, t, fit=False):
        exchange = [s + 1 for s, k in enumerate(tg.steps) if k == "exchange"]
        moved = 0
        for r0, r1, dst, step, ready in movable:
            before = [s for s in exchange if s < ready and s > tg.body[0]]
            if r1 > r0 and before and ready > tg.body[0]:
                tg.xfer["step"][r0:r1] = before[-1]
                tg.req["start"][dst] = np.minimum(tg.req["start"][dst], before[-1])
                moved += 1
        assert moved
        return moved

    monkeypatch.setattr(ex_graph, "early_gathers", too_early)
    with pytest.raises(RuntimeError, match="outside their lifetime"):   # the source is not live yet:
        compile_trial(cfg())                                            # expand's lifetime check stops it
    import compiler.expand as ex                                        # without that check, read-back
    monkeypatch.setattr(ex, "lifetime_faults", lambda tg: [])
    r = compile_trial(cfg())
    assert not r["run"].metrics()["validated"]
