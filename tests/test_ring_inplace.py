"""policy.ring_in_place (compiler/plan/ring.py, compiler/expand/ring.py in_place): ring
pieces cut in whole AMP out-channel groups (or along k, in whole in-channel groups and
micro-panels) and read where they live by a MATMUL with b in segments (isa.F_SEG_B,
F_SEG_K), so no tile copies its own pieces. Chosen by cost, validated on the
simulator (read-back, exchange check, expand's cycles), cheaper than the copying ring;
the tile graph checked by brute force against what plan priced; a segment pointed at the
wrong piece caught by read-back."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import isa
from compiler.expand import matmul as ex_matmul
from compiler.phases import compile_trial
from compiler.target import INTERLEAVED
from helpers import target_cfg, trial_ok as ok, finalist_grids as grids


def cfg(dtype: str = "fp8", grid: str = "4x2x2", **policy):
    return dict(model=dict(name="mlp", tokens=64, width=256, hidden=256, weight_dtype=dtype, repeat=2),
                target=target_cfg("tiny"),
                policy=dict(dict(grid=grid, weight_stationary=False, ring_in_place=True, ring_units=False), **policy))


# 4x2x2: 128-column blocks, cut by columns (8 out-channel groups); 4x8x1: 32 columns but
# 256 rows, cut along k (8 micro-panels)
@pytest.mark.parametrize("dtype,copies,grid,axis", [("fp8", 2, "4x2x2", 1), ("f16", 2, "4x2x2", 1),
                                                    ("fp8", 1, "4x2x2", 1), ("fp8", 2, "4x8x1", 2),
                                                    ("f16", 1, "4x8x1", 2)])
def test_in_place_chosen_validated_and_cheaper(dtype, copies, grid, axis):
    """FP8 (micro-panel pieces) and f16 (row-major) weights, one or two holders a piece,
    pieces by columns and along k."""
    on = compile_trial(cfg(dtype, grid, ring_copies=copies))
    off = compile_trial(cfg(dtype, grid, ring_copies=copies, ring_in_place=False))
    assert all(g.ring and g.inplace == axis for g in grids(on)), [g.label for g in grids(on)]
    assert not any(g.inplace for g in grids(off))
    assert ok(on) and ok(off)
    assert on["run"].metrics()["cycles"] < off["run"].metrics()["cycles"]
    tg = on["place"].tilegraph
    assert not (tg.kern["op"] == isa.COPY).any(), "a piece read in place needs no local copy"
    assert len(tg.bseg["kern"]) and r_flags(tg).all()


def r_flags(tg) -> np.ndarray:
    """Whether every kernel named by a b segment is a MATMUL flagged F_SEG_B."""
    k = np.unique(tg.bseg["kern"])
    return (tg.kern["op"][k] == isa.MATMUL) & ((tg.kern["dtype"][k] >> 16 & isa.F_SEG_B) != 0)


@pytest.mark.parametrize("grid", ["4x2x2", "4x8x1"])
def test_segments_by_brute_force(grid):
    """Expand's tile graph, checked against the grid (brute force, sharing no code with
    expand/ring.py): every grid tile's MATMUL reads its block as segments in column
    order covering the block once, its own pieces from interleaved home requests of
    whole 16-column groups relocated by a member's stride, the rest from its operand
    buffer, which holds exactly the received bytes (the block less its own pieces)."""
    r = compile_trial(cfg(grid=grid, ring_copies=2))
    tg, g = r["place"].tilegraph, r["model"].graph
    names = np.asarray(tg.names)
    b, k = tg.bseg, tg.kern
    home = names[tg.req["name"][b["req"]]] == "weights.ring"         # one request a tile holds every piece
    out = names[tg.req["name"][b["req"]]]
    for n, gr in r["expand"].finalists[0].candidate.strategy:
        op = g.ops[n]
        mine = np.isin(b["kern"], np.unique(b["kern"][out == f"{op.outputs[0]}.b"]))
        mm = np.unique(b["kern"][mine])
        assert len(mm) == gr.tiles
        for kk in mm:
            rows = np.flatnonzero(b["kern"] == kk)
            cols, own = b["len"][rows], home[rows]
            if gr.inplace == 1:            # columns: whole out-channel groups of 16
                assert cols.sum() == k["i2"][kk] == gr.nb and (cols[:-1] % 16 == 0).all()
            else:                          # rows: whole micro-panels of 32
                assert cols.sum() == k["i1"][kk] == gr.kb and (cols[:-1] % 32 == 0).all()
                assert (k["dtype"][kk] >> 16 & isa.F_SEG_K) != 0
            assert own.sum() == gr.copies                                   # its own pieces: one per holder
            assert (tg.req["region"][b["req"][rows[own]]] == INTERLEAVED).all()
            assert (b["reloc"][rows[own]] == tg.req["stride"][b["req"][rows[own]]]).all()
            assert (tg.req["tile"][b["req"][rows]] == k["tile"][kk]).all()
            buf = b["req"][rows[~own]]
            assert len(set(buf.tolist())) == 1
            x = tg.xfer
            got = (x["s_row_bytes"] * x["s_rows"])[x["dreq"] == buf[0]].sum()
            assert got == (gr.kb if gr.inplace == 1 else gr.nb) * cols[~own].sum()   # FP8: 1 B an element


@pytest.mark.parametrize("grid", ["4x2x2", "4x8x1"])
def test_a_segment_at_the_wrong_piece_is_caught(monkeypatch, grid):
    """Injected fault: each tile's two own segments swap their home addresses (each reads
    the other's piece: same widths, so the machine runs it); read-back must fail."""
    real = ex_matmul.in_place

    def swapped(c, op, grid, gt, x, P):
        buf, segs = real(c, op, grid, gt, x, P)
        own = np.flatnonzero(segs["reloc"] != 0)
        for t in np.unique(segs["tile"][own]):
            mine = own[segs["tile"][own] == t]
            if len(mine) < 2:
                continue
            a, b = mine[:2]
            for f in ("req", "off"):
                segs[f][[a, b]] = segs[f][[b, a]]
        return buf, segs

    monkeypatch.setattr(ex_matmul, "in_place", swapped)
    r = compile_trial(cfg(grid=grid, ring_copies=2))
    assert any(g.inplace and g.copies == 2 for g in grids(r))
    assert not r["run"].metrics()["validated"]
