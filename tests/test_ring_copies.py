"""policy.ring_copies (compiler/plan/ring.py with_ring, compiler/expand/ring.py ring_home
and gather_b): each ring piece held by c of its grid column's gm tiles, so a tile receives
the block less c pieces. Chosen by the beam's cost against its memory screen, validated on
the simulator (read-back, exchange check, expand's cycles), cheaper than each piece once;
the plan's bytes against what expand's transfers move; a wrong source caught."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.expand import ring as ex_ring
from compiler.phases import compile_trial
from helpers import target_cfg, trial_ok as ok, finalist_grids as grids


def cfg(dtype: str = "fp8", grid: str = "4x2x2", **policy):
    return dict(model=dict(name="mlp", tokens=64, width=256, hidden=256, weight_dtype=dtype, repeat=2),
                target=target_cfg("tiny"),
                policy=dict(dict(grid=grid, weight_stationary=False, ring_in_place=False, ring_units=False), **policy))   # copied pieces


def b_received(tg, op_out: str) -> np.ndarray:
    """Bytes each tile receives into matmul `op_out`'s B buffer (exchange rows only)."""
    x = tg.xfer
    names = np.asarray(tg.names)[tg.req["name"][x["dreq"]]]
    sel = (names == f"{op_out}.b") & (x["src"] != x["dst"])
    return np.bincount(x["dst"][sel], (x["s_row_bytes"] * x["s_rows"])[sel], minlength=tg.tiles)


@pytest.mark.parametrize("dtype,grid", [("fp8", "4x2x2"), ("f16", "4x2x2"), ("fp8", "5x2x2")])
def test_copies_chosen_validated_and_cheaper(dtype, grid):
    """FP8 (micro-panel pieces) and f16 (row-major) weights; gm = 5 is not a multiple of 2."""
    on, off = compile_trial(cfg(dtype, grid)), compile_trial(cfg(dtype, grid, ring_copies=1))
    assert any(g.ring and g.copies == 2 for g in grids(on)), [g.label for g in grids(on)]
    assert all(g.ring and g.copies == 1 for g in grids(off))
    assert ok(on) and ok(off)
    assert on["run"].metrics()["cycles"] < off["run"].metrics()["cycles"]


def test_each_piece_on_two_tiles_and_the_block_less_two_received():
    """From expand's tile graph (brute force over its requests and transfers): every grid
    tile holds two pieces of each weight (two home requests), and receives its block less
    those two pieces, as plan priced it (Options ring_recv)."""
    r = compile_trial(cfg())
    tg = r["expand"].finalists[0].tilegraph
    g = r["model"].graph
    names = np.asarray(tg.names)[tg.req["name"]]
    for n, gr in r["expand"].finalists[0].candidate.strategy:
        op = g.ops[n]
        W = op.inputs[1]
        homes = np.bincount(tg.req["tile"][names == f"{W}.home"], minlength=tg.tiles)
        assert (homes[:gr.tiles] == 2).all() and not homes[gr.tiles:].any(), homes
        block = gr.kb * gr.nb                             # FP8: 1 B per element
        piece = block // gr.gm
        got = b_received(tg, op.outputs[0])
        assert (got[:gr.tiles] == block - 2 * piece).all(), (op.outputs[0], got[:gr.tiles])


def test_a_wrong_piece_source_is_caught(monkeypatch):
    """Injected fault: in every grid row's source layout the first two pieces' sources are
    swapped (each read as the other); read-back must fail."""
    real = ex_ring.ring_home

    def swapped(c, name, stream, grid, count, pool=None):
        real(c, name, stream, grid, count, pool)
        for lay in c.ring_rows.get(name, []):
            for f in ("tile", "req", "off"):
                a = getattr(lay, f)
                a[:, [0, 1]] = a[:, [1, 0]]

    monkeypatch.setattr(ex_ring, "ring_home", swapped)
    r = compile_trial(cfg())
    assert any(g.copies == 2 for g in grids(r))
    assert not r["run"].metrics()["validated"]
