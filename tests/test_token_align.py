"""model.token_align (compiler/models/attention.py padded): tokens padded with masked zero tokens
to a multiple of 4, so an f16 row of keys is whole 64-bit words and the softmax's row chunks
(plan/rowcalls.py) may be single rows (with 2, a 14- or 730-key row is 4 bytes off a 64-bit
boundary and chunks come in pairs). The tiny ViT (13 tokens: 14 keys or 16) runs on the
simulator both ways and validates against the numpy reference op by op; with 4 its softmax
blocks are issued in single-row chunks; the padding rows are excluded from the checks; a fault
(the softmax's padding keys left unmasked) must be caught."""
import dataclasses

import pytest

from compiler import isa
from compiler.compare import real_rows
from compiler.expand import graph as expand_graph_mod
from compiler.models import vit
from compiler.phases import compile_trial
from helpers import target_cfg

VIT = dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=13, layers=2)
WIDE = dict(VIT, heads=1, tokens=509)      # 510 or 512 keys: 8 rows a tile of the tiny target's 64


def _softmax_rows(res):
    k = res["expand"].finalists[0].tilegraph.kern
    sel = k["op"] == isa.SOFTMAX
    return k["i0"][sel], k["i1"][sel], k["i3"][sel]


def test_padding_and_real_rows():
    for align, T in ((2, 14), (4, 16)):
        g, data = vit.build(dict(VIT, token_align=align))
        assert g.tensors["y"].shape[0] == T
        assert real_rows(g, "y").tolist() == [True] * 13 + [False] * (T - 13)
        assert not data["x"][13:].any()
    with pytest.raises(ValueError, match="token_align"):
        vit.build(dict(VIT, token_align=3))


def test_tiny_vit_validates_both_alignments_single_rows_with_4():
    """8 rows of 510 keys a tile: 1,020-byte rows pair up (6 + 2 costs more than one call of 8);
    8 rows of 512 run as 6 + 1 + 1 (single rows of 512 keys are cheaper than pairs), fewer cycles.
    The whole-softmax kernel's chunks: policy.deferred_norm (on by default) pinned off, its
    cheaper calls (no by-row multiply) chunk otherwise."""
    got = {}
    for align in (2, 4):
        r = compile_trial(dict(model=dict(WIDE, token_align=align), target=target_cfg("tiny"),
                               policy={"check": "all", "deferred_norm": False}))
        rows, cols, valid = _softmax_rows(r)
        assert (cols == 510 + 2 * (align == 4)).all() and (valid == 509).all()
        assert r["run"].validated, r["run"].failed
        m = r["run"].metrics()
        assert m["ops_failed"] == 0 and m["ops_checked"] > 0 and m["cycles"] == r["expand"].metrics()["cycles"]
        got[align] = rows, m["cycles"]
    assert not (got[2][0] == 1).any() and (got[4][0] == 1).any()
    assert got[4][1] < got[2][1]


def test_unmasked_padding_keys_are_caught(monkeypatch):
    """A SOFTMAX that forgets its `valid` (the 3 padding keys join every real row's softmax)
    must fail the op-by-op check."""
    real = expand_graph_mod.expand_rowwise

    def unmasked(c, op):
        if op.kind == "softmax":
            op = dataclasses.replace(op, attrs=tuple(sorted({**dict(op.attrs), "valid": 0}.items())))
        return real(c, op)
    monkeypatch.setattr(expand_graph_mod, "expand_rowwise", unmasked)
    bad = compile_trial(dict(model=dict(VIT, token_align=4), target=target_cfg("tiny"), policy={"check": "all"}))
    m = bad["run"].metrics()
    assert not m["validated"] and m["ops_failed"] > 0
