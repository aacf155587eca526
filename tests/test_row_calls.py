"""policy.row_calls (compiler/plan/rowcalls.py): a LayerNorm / softmax over a tile's rows issued
as the row chunks whose summed cycles are least. The chunk chooser is held to a brute force
over every composition of the rows (no shared code); the tiny ViT with a batch runs on the
simulator with the flag on and validates, its LayerNorms split to single rows (the by-row
vertex idles workers on 2-5 rows) for fewer cycles; an injected fault (every chunk written
at its block's first row) must be caught by the run's checks (the layer outputs). LayerNorms on
whole rows (policy.ln_halves off: as halves this case's rows run one a tile pair, nothing to chunk)."""
import itertools

import numpy as np
import pytest

from compiler import isa
from compiler.expand import graph as expand_graph_mod
from compiler.plan.rowcalls import best_chunks, chunked_cycles, row_quantum, split_blocks
from compiler.phases import compile_trial, target_of
from helpers import target_cfg

TOWER = dict(name="vit", preset="custom", scope="tower", width=128, hidden=512, heads=2, image=112, patch=14,
             pool="map", input="", layers=1, batch=2)


def _compositions(n: int):
    for cuts in itertools.product((0, 1), repeat=n - 1):
        parts, run = [], 1
        for c in cuts:
            if c:
                parts.append(run)
                run = 1
            else:
                run += 1
        yield parts + [run]


def _brute(n: int, cost: dict, q: int) -> int:
    ok = (p for p in _compositions(n) if all(x % q == 0 for x in p[:-1]))
    return min(sum(cost[x] for x in p) for p in ok)


@pytest.mark.parametrize("q", [1, 2, 4])
def test_best_chunks_is_the_least_total_over_every_composition(q):
    rng = np.random.default_rng(7)
    t = target_of(dict(target=target_cfg("ipu21")))
    costs = [lambda r: t.layernorm_cycles(r, 1152), lambda r: t.softmax_cycles(r, 730, False)]
    for _ in range(6):
        table = rng.integers(1, 1000, 10)
        costs.append(lambda r, table=table: table[np.asarray(r) - 1])
    for cost in costs:
        for n in range(1, 10):
            ch = best_chunks(n, cost, q)
            c = {x: int(cost(np.asarray([x]))[0]) for x in range(1, n + 1)}
            assert sum(ch) == n and all(x % q == 0 for x in ch[:-1])
            assert sum(c[x] for x in ch) == _brute(n, c, q), (n, q, ch)


@pytest.mark.parametrize("q", [1, 2])
def test_chunked_cycles_is_the_least_total_over_every_composition(q):
    """The plan's price of a row-wise block (plan/rowcalls.chunked_cycles) against the brute force."""
    rng = np.random.default_rng(11)
    table = rng.integers(1, 1000, 9)
    cost = lambda r: table[np.asarray(r) - 1]
    c = {x: int(table[x - 1]) for x in range(1, 10)}
    rows = rng.integers(1, 10, (3, 5))
    got = chunked_cycles(rows, cost, q)
    assert got.shape == rows.shape
    assert got.tolist() == [[_brute(int(n), c, q) for n in row] for row in rows]


def test_split_blocks_and_quantum():
    i, first, n = split_blocks(np.asarray([3, 1, 3]), lambda r: np.where(np.asarray(r) == 1, 1, 100), 1)
    assert i.tolist() == [0, 0, 0, 1, 2, 2, 2] and first.tolist() == [0, 1, 2, 0, 0, 1, 2] and set(n) == {1}
    assert row_quantum(2304) == 1 and row_quantum(1460) == 2 and row_quantum(130) == 4 and row_quantum(65) == 8


def _ln_rows(res):
    k = res["expand"].finalists[0].tilegraph.kern
    return k["i0"][k["op"] == isa.LAYERNORM]


def test_row_calls_tiny_vit_batch_validates_with_fewer_cycles():
    off = compile_trial(dict(model=TOWER, target=target_cfg("tiny"), policy=dict(row_calls=False, ln_halves=False)))
    on = compile_trial(dict(model=TOWER, target=target_cfg("tiny"), policy=dict(row_calls=True, ln_halves=False)))
    assert (_ln_rows(off) > 1).any()                 # the case has multi-row LayerNorm blocks ...
    assert (_ln_rows(on) == 1).all()                 # ... which the flag issues one row a call
    assert _ln_rows(on).sum() == _ln_rows(off).sum()
    assert on["run"].validated, on["run"].failed
    assert on["run"].metrics()["cycles"] == on["expand"].metrics()["cycles"] < off["expand"].metrics()["cycles"]


def test_plan_prices_the_row_chunks_expand_issues():
    """With the flag on, plan's estimate falls by what expand's exact cycles fall, on the same grids
    (the tiny tower with a batch: its LayerNorm blocks split into rows in both)."""
    def trial(on):
        r = compile_trial(dict(model=TOWER, target=target_cfg("tiny"), policy=dict(row_calls=on, ln_halves=False)))
        cand = r["plan"].candidates[0]
        return cand.cycles, r["expand"].metrics()["cycles"], [(n, g.label) for n, g in cand.strategy]
    (p0, e0, g0), (p1, e1, g1) = trial(False), trial(True)
    assert g0 == g1 and e1 < e0
    assert p0 - p1 == e0 - e1


def test_row_calls_fault_every_chunk_at_its_block_start_is_caught(monkeypatch):
    real = expand_graph_mod._row_calls

    def at_block_start(c, op, r, k, ebytes):
        i, first, n = real(c, op, r, k, ebytes)
        return i, np.zeros_like(first), n
    monkeypatch.setattr(expand_graph_mod, "_row_calls", at_block_start)
    bad = compile_trial(dict(model=TOWER, target=target_cfg("tiny"), policy=dict(row_calls=True, ln_halves=False)))
    m = bad["run"].metrics()
    assert not m["validated"] and m["ops_failed"] + m["layers_failed"] > 0
