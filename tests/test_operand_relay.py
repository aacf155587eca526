"""policy.operand_relay (compiler/plan/relay.py): a matmul's A held as whole rows on
fewer tiles than the machine has (a LayerNorm's output) is first spread over idle
tiles, so the gather that follows has more senders. Chosen by the plan's cost, validated
by read-back like every plan, and a broken relay must be caught."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from compiler.expand import matmul as ex_matmul
from compiler.phases import compile_trial
from compiler.plan.relay import PIECE_ELEMS, relay_blocks, relay_pieces
from helpers import target_cfg

# 16 tokens on 64 tiles: each LayerNorm output row sits on one of 16 tiles
VIT = dict(name="vit", preset="custom", width=128, hidden=256, heads=2, tokens=16, layers=2)


def cfg(fp8: bool = False, **policy):
    # sends charged per receiver: with broadcast sends (a LayerNorm row's sender pays once
    # whatever its receivers) spreading A first no longer pays, and the plan never relays
    policy = dict(broadcast_sends=False, ln_halves=False, **policy)   # whole-row LayerNorms: what a relay spreads
    return dict(model=dict(VIT, fp8_activations=fp8), target=target_cfg("tiny"), policy=policy)


def relayed(r) -> list[str]:
    return [g.label for _, g in r["expand"].finalists[0].candidate.strategy if g.relay]


@pytest.mark.parametrize("fp8", [False, True])
def test_relay_chosen_validated_and_cheaper(fp8):
    """Also with FP8 activations: the relayed rows are the cast's, 1 B per element."""
    on, off = compile_trial(cfg(fp8)), compile_trial(cfg(fp8, operand_relay=False))
    assert relayed(on), "the tiny ViT's qkv / fc1 should relay their LayerNorm input"
    assert not relayed(off)
    for r in (on, off):
        m = r["run"].metrics()
        assert r["report"].summary["status"] == "ok" and m["validated"] and m["ops_failed"] == 0
    assert on["run"].metrics()["cycles"] < off["run"].metrics()["cycles"]


def test_pieces_partition_rows_onto_idle_tiles():
    T, rows, cols = 64, 16, 200
    tile = np.arange(rows) * 4
    cs, tiles = relay_pieces(np.arange(rows), np.ones(rows), np.zeros(rows), np.full(rows, cols), tile, cols, T)
    assert (cs % PIECE_ELEMS == 0).all() and cs[0] == 0 and len(cs) >= 2
    assert (tiles[:, 0] == tile).all()
    helpers = tiles[:, 1:].ravel()
    assert len(set(helpers.tolist())) == helpers.size and not set(helpers.tolist()) & set(tile.tolist())
    blocks, sent, recv = relay_blocks((np.arange(rows), np.ones(rows, np.int64), np.zeros(rows, np.int64),
                                       np.full(rows, cols), tile), cols, T)
    assert int(blocks[3].sum()) == rows * cols                          # every element in one piece
    assert sent.sum() == recv.sum() == rows * (cols - (cs[1] - cs[0]))   # piece 0 stays in place
    # not whole rows, or no idle tiles: no relay
    assert relay_pieces(np.arange(rows), np.ones(rows), np.zeros(rows), np.full(rows, 100), tile, cols, T) is None
    assert relay_pieces(np.arange(64), np.ones(64), np.zeros(64), np.full(64, cols), np.arange(64), cols, T) is None


def test_a_relay_copying_the_wrong_row_is_caught(monkeypatch):
    """Injected fault: the relay copies each row's pieces from the next row; the
    simulator then computes on a wrong A and read-back must fail."""
    real = ex_matmul.gather

    def shifted(bld, src, step, r0, r1, *a, **k):
        if sys._getframe(1).f_code.co_name == "relay_operand":
            r0 = (np.asarray(r0) + 1) % src.rows
            r1 = r0 + 1
        return real(bld, src, step, r0, r1, *a, **k)

    monkeypatch.setattr(ex_matmul, "gather", shifted)
    r = compile_trial(cfg())
    assert relayed(r)
    assert not r["run"].metrics()["validated"]
