"""model.fp8_scores: with FP8 activations the attention scores q·kᵀ read q and k in FP8 (one
cast of the QKV output, its scale per layer like every cast), K gathered in the AMP's
micro-panels along the head dimension, each panel whole rows of K (expand/matmul.py
transposed_panels). A 2-layer ViT on the tiny target, 80 columns a head (panels of 32, 32 and
a partial 16), runs on the simulator off and on: both validate every row of every op against
the reference of their own graph, on takes fewer cycles with every scores MATMUL FP8 x FP8
reading b as panels; panels gathered in the wrong order must be caught by read-back."""
import numpy as np
import pytest

from compiler import isa
from compiler.expand import matmul as expand_matmul_mod
from helpers import flag_validates_cheaper, tiny_trial

MODEL = dict(name="vit", preset="custom", width=160, hidden=256, heads=2, tokens=63, layers=2,
             fp8_activations=True, fp8_scales="bound")


def _trial(on: bool):
    return tiny_trial({**MODEL, "fp8_scores": on})


@pytest.fixture(scope="module")
def both():
    return _trial(False), _trial(True)


def _scores_kernels(r):
    g, tg = r["model"].graph, r["expand"].finalists[0].tilegraph
    n = next(j for j, o in enumerate(g.ops) if o.outputs[0] == "scores")
    steps = {s for s, op in enumerate(tg.step_op) if op == n}
    k = tg.kern
    return g.ops[n], k["dtype"][(k["op"] == isa.MATMUL) & np.isin(k["step"] - 1, list(steps))]


def test_fp8_scores_validate_with_fewer_cycles(both):
    off, on = both
    flag_validates_cheaper(off, on)
    op0, d0 = _scores_kernels(off)
    op1, d1 = _scores_kernels(on)
    assert op0.inputs == ("qkv", "qkv") and op1.inputs == ("qkv.fp8", "qkv.fp8")
    fp8 = isa.DTYPES["fp8"]
    assert len(d1) and ((d1 & 0xFF) == fp8).all() and (((d1 >> 8) & 0xFF) == 0).all()     # b fp8, a as b
    assert ((d1 >> 16) & isa.F_PANEL_B).all() and not ((d1 >> 16) & isa.F_TRANSPOSE_B).any()
    assert ((d0 >> 16) & isa.F_TRANSPOSE_B).all()


def test_panels_out_of_order_are_caught(monkeypatch):
    """The first two panels of every K block swapped in the operand buffer (same sizes)."""
    def swapped(c, name, x, r0, nr, c0, nc, tiles, req, off, P):
        e = c.lay[name].ebytes
        for p0 in range(0, int(nc.max()), P):
            has = p0 < nc
            h = np.minimum(nc - p0, P)[has]
            slot = {0: P, P: 0}.get(p0, p0)
            expand_matmul_mod.gather(c.bld, c.lay[name], x, r0[has], (r0 + nr)[has], (c0 + p0)[has],
                                     (c0 + p0)[has] + h, tiles[has], req[has], (off + slot * nr * e)[has], h * e)
    monkeypatch.setattr(expand_matmul_mod, "transposed_panels", swapped)
    m = _trial(True)["run"].metrics()
    assert not m["validated"] and m["ops_failed"] > 0 and m["first_failed_op"]["op"] == "scores"
