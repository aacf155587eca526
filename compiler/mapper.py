"""How a phase fans work out without knowing about Dask.

A mapper is called as mapper(task, fn, items, reduce, init, shared) and returns
the accumulator after `acc = reduce(acc, index, fn(item, **shared))` for every
item. Reducers must give the same result whatever order results arrive in (tie-break
on the index). `serial` is the in-process mapper; pipeline/ supplies a bounded,
cached, distributed one with the same contract."""
from __future__ import annotations


def serial(task, fn, items, reduce, init, shared=None):
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
