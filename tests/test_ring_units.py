"""policy.ring_units (compiler/plan/ring.py unit_pieces, compiler/expand/ring2d.py): ring
pieces cut in 2-D units (whole in-channel groups and micro-panels x out-channel groups),
a block's units in column-major order split evenly, each piece read where it lives as
rectangles of b (isa.F_SEG_2D), so no tile copies its own pieces. Chosen by cost,
validated on the simulator (read-back, exchange check, expand's cycles = the
simulator's), cheaper than the copying ring; the tile graph checked by brute force
(pieces recounted with no code of ring2d.py); a rectangle pointed at the wrong bytes
caught by read-back."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import isa
from compiler.expand import matmul as ex_matmul
from compiler.phases import compile_trial
from compiler.target import INTERLEAVED
from helpers import finalist_grids as grids
from helpers import target_cfg
from helpers import trial_ok as ok


def cfg(dtype: str = "fp8", grid: str = "3x2x2", **policy):
    return dict(model=dict(name="mlp", tokens=64, width=256, hidden=256, weight_dtype=dtype, repeat=2),
                target=target_cfg("tiny"),
                policy=dict(dict(grid=grid, weight_stationary=False, ring_units=True), **policy))


# 3x2x2: 128 x 128 blocks = 4 panels x 8 groups = 32 units over 3 tiles (10, 11, 11), where
# columns alone give 8 groups (2, 3, 3) and k alone 4 panels (1, 1, 2); 3x8x1: 256 x 32
@pytest.mark.parametrize("dtype,copies,grid", [("fp8", 1, "3x2x2"), ("fp8", 2, "3x2x2"), ("f16", 1, "3x2x2"),
                                               ("fp8", 1, "3x8x1"), ("f16", 2, "4x2x2")])
def test_units_chosen_validated_and_cheaper(dtype, copies, grid):
    on = compile_trial(cfg(dtype, grid, ring_copies=copies))
    off = compile_trial(cfg(dtype, grid, ring_copies=copies, ring_units=False))
    assert all(g.ring and g.inplace == 3 for g in grids(on)), [g.label for g in grids(on)]
    assert not any(g.inplace for g in grids(off))
    assert ok(on) and ok(off)
    assert on["run"].metrics()["cycles"] < off["run"].metrics()["cycles"]
    tg = on["place"].tilegraph
    assert not (tg.kern["op"] == isa.COPY).any(), "a piece read in place needs no local copy"
    k = np.unique(tg.bseg["kern"])
    assert len(k) and ((tg.kern["dtype"][k] >> 16 & (isa.F_SEG_B | isa.F_SEG_2D)) == isa.F_SEG_B | isa.F_SEG_2D).all()


def _pieces(rows, cols, gm, qk, qn):
    """Brute force: unit (uk, un) -> piece, column-major, piece p = [p*U//s, (p+1)*U//s)."""
    Uk, Un = -(-rows // qk), -(-cols // qn)
    U = Uk * Un
    s = min(gm, U)
    bounds = [p * U // s for p in range(s + 1)]
    piece = {}
    for un in range(Un):
        for uk in range(Uk):
            lin = un * Uk + uk
            piece[uk, un] = next(p for p in range(s) if bounds[p] <= lin < bounds[p + 1])
    return piece, s


@pytest.mark.parametrize("dtype,copies,grid", [("fp8", 2, "3x2x2"), ("f16", 1, "3x8x1")])
def test_rectangles_by_brute_force(dtype, copies, grid):
    """Every grid tile's MATMUL reads its block as rectangles that tile it once on whole
    group x panel edges; the elements it reads from its home request (interleaved,
    relocated by the member stride) are exactly the units of the pieces its grid row
    holds (rows (p + d) mod s, d < copies), recounted here; the rest come from one operand
    buffer, which receives exactly those bytes."""
    r = compile_trial(cfg(dtype, grid, ring_copies=copies))
    tg, g = r["place"].tilegraph, r["model"].graph
    names = np.asarray(tg.names)
    b, k, x = tg.bseg, tg.kern, tg.xfer
    eb = 1 if dtype == "fp8" else 2
    qk, qn = 32 if dtype == "fp8" else 16, 16
    home = names[tg.req["name"][b["req"]]] == "weights.ring"
    for n, gr in r["expand"].finalists[0].candidate.strategy:
        op = g.ops[n]
        assert gr.inplace == 3 and gr.copies == copies
        mine = np.isin(b["kern"], np.unique(b["kern"][names[tg.req["name"][b["req"]]] == f"{op.outputs[0]}.b"]))
        for kk in np.unique(b["kern"][mine]):
            rows = np.flatnonzero(b["kern"] == kk)
            K, N = int(k["i1"][kk]), int(k["i2"][kk])
            paint = np.zeros((K, N), np.int64)
            for s_ in rows:
                r0, c0, rl, cl = (int(b[f][s_]) for f in ("row", "col", "rows", "len"))
                assert r0 % qk == 0 and c0 % qn == 0
                assert (r0 + rl) % qk == 0 or r0 + rl == K
                assert (c0 + cl) % qn == 0 or c0 + cl == N
                paint[r0:r0 + rl, c0:c0 + cl] += 1 if home[s_] else 10
            assert (paint % 10 + paint // 10 == 1).all(), "rectangles tile b once"
            tile = int(k["tile"][kk])
            i = (tile - gr.rot) % tg.tiles // (gr.gk * -(-op.attr("n") // gr.nb))     # its grid row
            piece, s = _pieces(K, N, gr.gm, qk, qn)
            held = {p for p in range(s) if i < s and (i - p) % s < gr.copies}
            want = np.zeros((K, N), bool)
            for (uk, un), p in piece.items():
                if p in held:
                    want[uk * qk:(uk + 1) * qk, un * qn:(un + 1) * qn] = True
            assert np.array_equal(paint == 1, want), (tile, i)
            own = rows[home[rows]]
            assert (tg.req["region"][b["req"][own]] == INTERLEAVED).all()
            assert (b["reloc"][own] == tg.req["stride"][b["req"][own]]).all()
            buf = np.unique(b["req"][rows[~home[rows]]])
            assert len(buf) <= 1
            got = (x["s_row_bytes"] * x["s_rows"])[np.isin(x["dreq"], buf)].sum()
            assert got == (~want).sum() * eb


def test_a_rectangle_at_the_wrong_address_is_caught(monkeypatch):
    """Injected fault: on each tile two rectangles of the same shape swap their addresses
    in the segment table (each reads the other's bytes; the machine runs it); read-back
    must fail."""
    real = ex_matmul.in_place_units

    def swapped(c, op, grid, gt, x):
        buf, segs = real(c, op, grid, gt, x)
        key = np.stack([segs["tile"], segs["rows"], segs["len"]], 1)
        _, inv, cnt = np.unique(key, axis=0, return_inverse=True, return_counts=True)
        done = set()
        for s_ in np.flatnonzero(cnt[inv.ravel()] > 1):
            grp = int(inv.ravel()[s_])
            if grp in done:
                continue
            done.add(grp)
            a, b = np.flatnonzero(inv.ravel() == grp)[:2]
            for f in ("req", "off", "reloc"):
                segs[f][[a, b]] = segs[f][[b, a]]
        return buf, segs

    monkeypatch.setattr(ex_matmul, "in_place_units", swapped)
    r = compile_trial(cfg("fp8", "3x2x2", ring_copies=1))
    assert all(g.inplace == 3 for g in grids(r))
    assert not r["run"].metrics()["validated"]
