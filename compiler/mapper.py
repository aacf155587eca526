"""How a phase fans work out without knowing about Dask.

A mapper is called as mapper(task, fn, items, reduce, init, shared, stored=None) and
returns the accumulator after `acc = reduce(acc, index, fn(item, **shared))` for every
item. Reducers must give the same result whatever order results arrive in (tie-break
on the index). `stored(result)`, if given, is what a caching mapper keeps of a result
(the rest being cheaper to recompute than to store); a result read back from its cache
is that, so the reducer must accept it too. `serial` is the in-process mapper (it caches
nothing); pipeline/ supplies a bounded, cached, distributed one with the same contract."""
from __future__ import annotations


def serial(task, fn, items, reduce, init, shared=None, stored=None):
    acc = init
    for i, item in enumerate(items):
        acc = reduce(acc, i, fn(item, **(shared or {})))
    return acc


def keep_best(k: int, score):
    """Reducer keeping the k results with the lowest (score(result), index); results
    whose score is None are dropped. Same answer for any arrival order or window."""
    def reduce(acc, i, res):
        s = score(res)
        if s is None:
            return acc
        acc = sorted(acc + [((s, i), res)], key=lambda e: e[0])
        return acc[:k]
    return reduce


def keep_distinct(k: int, score, key):
    """Reducer keeping one result per key, the best of it (lowest (score, index)), for
    the k keys whose best is lowest, as ((score, index), key, result) best first;
    results whose score is None are dropped. Same answer for any arrival order or
    window: a key pushed out can only return with a better result than the one it lost."""
    def reduce(acc, i, res):
        s = score(res)
        if s is None:
            return acc
        kk = key(res)
        if any(e[1] == kk and e[0] <= (s, i) for e in acc):
            return acc
        acc = sorted([e for e in acc if e[1] != kk] + [((s, i), kk, res)], key=lambda e: e[0])
        return acc[:k]
    return reduce
