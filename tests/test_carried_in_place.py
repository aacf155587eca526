"""policy.carried_in_place (compiler/expand/graph.py carried_in_place): the Repeat body's
carried output, a layer's last residual add, is written straight into the blocks of the body
input it feeds when they are alike, so the body ends without the exchange superstep that
copied it there every layer. A 3-layer ViT on the tiny target runs on the simulator flag off
and on: both validate every row of every iteration, on is one exchange step a layer shorter
with the same supersteps otherwise, shorter by exactly that step's cycles; a body that skips the carry without writing in place must be caught."""
import pytest

from compiler.expand import graph as expand_graph_mod
from helpers import flag_validates_cheaper, tiny_trial

MODEL = dict(name="vit", preset="custom", width=128, hidden=256, heads=4, tokens=63, layers=3)


@pytest.fixture(scope="module")
def both():
    return tiny_trial(MODEL, carried_in_place=False), tiny_trial(MODEL, carried_in_place=True)


def _body(r):
    tg = r["expand"].finalists[0].tilegraph
    b0, b1 = tg.body_steps()
    return tg, tg.steps[b0:b1]


def test_in_place_validates_one_step_shorter(both):
    off, on = both
    flag_validates_cheaper(off, on)
    (tg0, s0), (tg1, s1) = _body(off), _body(on)
    assert s0[-1] == "exchange" and s1[-1] == "compute" and len(s1) == len(s0) - 1
    assert s0[:-1] == s1
    drop = tg0.analysis["step_cycles"][tg0.body_steps()[1] - 1]
    assert tg0.analysis["body_cycles"] - tg1.analysis["body_cycles"] == drop
    y = next(n for n, o in enumerate(on["model"].graph.ops) if o.outputs[0] == "y")
    d = tg1.dump
    names = {tg1.names[tg1.req["name"][q]] for q in d["req"][d["op"] == y]}
    assert names == {"x.home"}                  # y's blocks are the input x's (a home: this model's input)


def test_a_skipped_carry_is_caught(monkeypatch):
    """The risk the flag brings: a body that ends without the carry while its output is
    not in the input's blocks. Every later iteration then reads the first's input."""
    monkeypatch.setattr(expand_graph_mod, "_end_body", lambda c: len(c.kinds))
    m = tiny_trial(MODEL, carried_in_place=False)["run"].metrics()
    assert not m["validated"] and m["ops_failed"] > 0
