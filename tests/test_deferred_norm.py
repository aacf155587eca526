"""policy.deferred_norm (compiler/deferred_norm.py): the attention softmax leaves its rows
unnormalised (SOFTMAX isa.F_SM_DEFER, f32 row sums beside them) and p·v divides its output
rows by the sums (ROWSCALE F_RECIP where the k-split's reduction finishes them). A ViT on
the tiny target with 128 keys and 32 columns a head (where the division pays there too)
runs on the simulator flag off and on and validates op by op against the numpy reference
(the device's probs against the deferred reference op, attn against the row-normalised
one) and at the graph's outputs against the model's own softmax; on, it takes fewer cycles,
the simulator's equal expand's, and the plan's estimate falls by what expand's body falls.
Faults must be caught: the sums gathered from another head's rows, and the division
skipped. An attention alone, forced to grids with and without a k-split, validates both
ways the division runs."""
import numpy as np
import pytest

from compiler import isa
from compiler.deferred_norm import deferrable, defer
from compiler.expand import matmul as expand_matmul_mod
from compiler.phases import compile_trial
from helpers import flag_validates_cheaper, kernel_flags, plan_prices_expand, target_cfg, tiny_trial

MODEL = dict(name="vit", preset="custom", width=256, hidden=512, heads=8, tokens=127, layers=2)


def _trial(on: bool):
    return tiny_trial(MODEL, deferred_norm=on)


@pytest.fixture(scope="module")
def both():
    return _trial(False), _trial(True)


def test_deferred_validates_with_fewer_cycles(both):
    off, on = both
    assert (kernel_flags(off, isa.SOFTMAX) == 0).all() and len(kernel_flags(off, isa.ROWSCALE)) == 0
    assert (kernel_flags(on, isa.SOFTMAX) == isa.F_SM_DEFER).all() and (kernel_flags(on, isa.ROWSCALE) == isa.F_RECIP).all()
    flag_validates_cheaper(off, on)


def test_plan_prices_what_expand_builds(both):
    """Same grids; the plan's estimate falls by what expand's exact body cycles fall."""
    plan_prices_expand(*both)


def test_rewrite_marks_each_attention_once(both):
    g = both[0]["model"].graph
    pairs = deferrable(g)
    assert len(pairs) == 1 and g.ops[pairs[0][0]].kind == "softmax" and g.ops[pairs[0][1]].kind == "matmul"
    d = defer(g, True)
    assert d.ops[pairs[0][0]].attr("deferred") and d.ops[pairs[0][1]].attr("normalise")
    assert defer(g, False) is g and deferrable(d) == [] and g.ops[pairs[0][0]].attr("deferred") is None


def test_sums_of_another_head_are_caught(monkeypatch):
    orig = expand_matmul_mod._row_sums
    monkeypatch.setattr(expand_matmul_mod, "_row_sums",
                        lambda c, op, x, tile, red, q, i, gs, ms, ng, rows, groups, glen, r0=0:
                        orig(c, op, x, tile, red, q, i, gs, ms, ng, rows, groups[::-1].copy(), glen, r0))
    m = _trial(True)["run"].metrics()
    assert not m["validated"] and m["ops_failed"] > 0 and m["first_failed_op"]["op"] == "attn"


def test_division_skipped_is_caught(monkeypatch):
    monkeypatch.setattr(expand_matmul_mod, "_divide", lambda *a, **k: None)
    m = _trial(True)["run"].metrics()
    assert not m["validated"] and m["ops_failed"] > 0


@pytest.mark.parametrize("grid", ["4x1x1", "4x1x2"])
def test_attention_alone_without_and_with_a_k_split(grid):
    """p·v with no k-split divides its MATMUL's output in place (the sums gathered with its
    operands); with one, after the reduction's ADD. Both validate op by op, 37 tokens (38 keys,
    one masked) a head."""
    r = compile_trial(dict(model=dict(name="attention", tokens=37, heads=2, head_dim=8), target=target_cfg("tiny"),
                           policy={"check": "all", "deferred_norm": True, "grid": grid}))
    m = r["run"].metrics()
    assert r["run"].validated and m["ops_failed"] == 0 and m["ops_checked"] == 3, r["run"].failed
    assert (kernel_flags(r, isa.ROWSCALE) == isa.F_RECIP).all() and len(kernel_flags(r, isa.ROWSCALE)) > 0
