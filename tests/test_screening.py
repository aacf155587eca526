"""Expand screens candidates in bounded batches and keeps only the placement
shortlist: the shortlist is identical for any window, executor or arrival order."""
import pytest

from compiler import mapper as mappers
from compiler.expand import expand
from compiler.phases import model_phase, policy_of, target_of
from compiler.plan import plan
from helpers import target_cfg
from pipeline.fanout import Executor, ExecutorConfig
from pipeline.stages import make_mapper
from pipeline.store import Store

CFG = dict(model=dict(name="mlp", tokens=24, width=32, hidden=64), target=target_cfg("tiny"),
           policy=dict(plan_candidates=6, finalists=2))


def shortlist(res):
    return [(e.candidate.label, e.analysis["cycles"]) for e in res.finalists]


def expanded(p):
    """Plan's candidates, and each homes one once more with stationary weights."""
    every = frozenset(n for n, _ in p.candidates[0].strategy)     # the MLP: every matmul's weight can stay
    seen = {(k.strategy, k.resident) for k in p.candidates}
    return len(p.candidates) + sum(not k.resident and (k.strategy, every) not in seen for k in p.candidates)


@pytest.fixture(scope="module")
def inputs():
    m = model_phase(CFG)
    return m, plan(m, target_of(CFG), policy_of(CFG))


def test_serial_shortlist_is_the_best_of_all(inputs):
    m, p = inputs
    res = expand(m, p, target_of(CFG), policy_of(CFG))
    everything = expand(m, p, target_of(CFG), policy_of(dict(CFG, policy=dict(plan_candidates=6, finalists=6))))
    assert shortlist(res)[:2] == shortlist(everything)[:2]
    n = expanded(p)                               # + a composed candidate per weight mode at most
    assert n <= res.screened <= n + 2
    # behind finalists that all keep weights resident: the best homes candidate, as fallback
    top, extra = res.finalists[:2], res.finalists[2:]
    homes = [e for e in everything.finalists if not e.candidate.stationary][:1]
    want = homes if all(e.candidate.stationary for e in top) else []
    assert [e.candidate.label for e in extra] == [e.candidate.label for e in want]


@pytest.mark.parametrize("kind,window", [("sync", 1), ("threads", 1), ("threads", 3), ("threads", 8)])
def test_same_shortlist_for_any_window(inputs, tmp_path, kind, window):
    m, p = inputs
    want = shortlist(expand(m, p, target_of(CFG), policy_of(CFG), mappers.serial))
    with Executor(ExecutorConfig(kind=kind, workers=2, window=window)) as ex:
        got = expand(m, p, target_of(CFG), policy_of(CFG), make_mapper(ex, Store(tmp_path / "store")))
    assert shortlist(got) == want


def test_composed_candidate_is_never_worse(inputs):
    """Mixing each matmul's measured-cheapest grid is tried once more, and kept only on merit."""
    m, p = inputs
    on = expand(m, p, target_of(CFG), policy_of(CFG))
    off = expand(m, p, target_of(CFG), policy_of(dict(CFG, policy=dict(CFG["policy"], compose_candidates=False))))
    assert on.finalists[0].analysis["cycles"] <= off.finalists[0].analysis["cycles"]
    n = expanded(p)
    assert off.screened == n and n <= on.screened <= n + 2


def test_keep_distinct_is_the_best_per_key_in_any_order():
    """mapper.keep_distinct against a brute force (every result sorted, the first of each
    key): the same k keys and results for every arrival order."""
    import random
    rng = random.Random(0)
    for trial in range(200):
        items = [(rng.randrange(6), rng.randrange(4)) for _ in range(rng.randrange(1, 12))]   # (score, key)
        scores = [None if s == 5 else s for s, _ in items]
        want, seen = [], set()
        for s, i in sorted((s, i) for i, s in enumerate(scores) if s is not None):
            if items[i][1] not in seen:
                seen.add(items[i][1])
                want.append(i)
        k = rng.randrange(1, 4)
        red = mappers.keep_distinct(k, lambda i: scores[i], lambda i: items[i][1])
        order = list(range(len(items)))
        rng.shuffle(order)
        acc = []
        for i in order:
            acc = red(acc, i, i)
        assert [res for _, _, res in acc] == want[:k], (items, k, order)
