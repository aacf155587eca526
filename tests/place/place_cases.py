"""Small random placement problems for the tests (shared helper, not a test)."""
from __future__ import annotations

import numpy as np

from compiler.place import Problem

BASE = 0x4C000
E = 1024  # small elements keep brute force and CP-SAT quick


def small_map(r0_elems=2, r1_pairs=1):
    return dict(memory_base=BASE, region0_end=BASE + r0_elems * E,
                memory_end=BASE + r0_elems * E + r1_pairs * 2 * E, element_bytes=E)


def random_problem(seed, n=8, fill=0.8, edges=0.3, seqs=0.15, reserved=True, regions=True,
                   horizon=8, **mapkw):
    """Random requests sized so live bytes hover around `fill` of capacity."""
    rng = np.random.default_rng(seed)
    m = small_map(**mapkw)
    cap = m["memory_end"] - m["memory_base"]
    start = rng.integers(0, horizon, n)
    end = start + rng.integers(1, horizon // 2 + 1, n)
    avg_live = max(1.0, n * (end - start).mean() / horizon)
    size = np.maximum(8, (rng.random(n) * 2 * fill * cap / avg_live)).astype(np.int64)
    align = 2 ** rng.integers(0, 7, n)
    region = rng.choice([0, 0, 1, 2], n) if regions else np.zeros(n, int)
    count = np.where(rng.random(n) < seqs, rng.integers(2, 4, n), 1)
    stride = np.where(count > 1, -(-size // align) * align + align * rng.integers(0, 2, n), 0)
    size = np.where(count > 1, np.maximum(8, size // count), size)
    stride = np.where(count > 1, -(-size // align) * align, 0)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < edges]
    res = [(m["memory_base"] + E // 2, m["memory_base"] + E // 2 + 128)] if reserved else []
    return Problem(**m, size=size, align=align, start=start, end=end, region=region,
                   count=count, stride=stride, bank_edges=np.array(pairs, np.int64).reshape(-1, 2),
                   reserved=np.array(res, np.int64).reshape(-1, 2),
                   names=[f"r{i}" for i in range(n)])


def brute_force(p: Problem, step=None):
    """Exhaustive search over every aligned start (tiny problems only): True if
    any legal placement exists. Uses the independent validator as the oracle."""
    from compiler.place import validate
    n = len(p)
    ext = p.extent
    cands = []
    for i in range(n):
        al = int(p.align[i]) if step is None else max(int(p.align[i]), step)
        c = [a for a in range(p.memory_base, p.memory_end - int(ext[i]) + 1, al)
             if a % int(p.align[i]) == 0]
        cands.append(c)
    addr = [-1] * n
    order = np.argsort([len(c) for c in cands])

    def rec(k):
        if k == n:
            return True
        i = int(order[k])
        for a in cands[i]:
            addr[i] = a
            idx = [int(order[t]) for t in range(k + 1)]
            q = _restrict(p, idx)
            if not validate(q, [addr[j] for j in idx]):
                if rec(k + 1):
                    return True
        addr[i] = -1
        return False

    return rec(0)


def _restrict(p: Problem, idx):
    idx = list(idx)
    pos = {j: t for t, j in enumerate(idx)}
    e = [(pos[a], pos[b]) for a, b in p.bank_edges.tolist() if a in pos and b in pos]
    return Problem(p.memory_base, p.region0_end, p.memory_end, p.element_bytes,
                   size=p.size[idx], align=p.align[idx], start=p.start[idx], end=p.end[idx],
                   region=p.region[idx], count=p.count[idx], stride=p.stride[idx],
                   bank_edges=np.array(e, np.int64).reshape(-1, 2), reserved=p.reserved,
                   max_alloc=p.max_alloc)


def guillotine_rects(seed, n, cap, horizon):
    """n rectangles (t0, t1, a0, a1) tiling [0, horizon) x [0, cap) exactly: a zero-slack
    lifetime x size instance by random guillotine cuts, in random order."""
    rng = np.random.default_rng(seed)
    rects = [(0, horizon, 0, cap)]
    while len(rects) < n:
        k = int(rng.integers(len(rects)))
        t0, t1, a0, a1 = rects[k]
        if rng.random() < 0.5 and t1 - t0 >= 2:
            c = int(rng.integers(t0 + 1, t1))
            rects[k:k + 1] = [(t0, c, a0, a1), (c, t1, a0, a1)]
        elif a1 - a0 >= 2:
            c = int(rng.integers(a0 + 1, a1))
            rects[k:k + 1] = [(t0, t1, a0, c), (t0, t1, c, a1)]
    return [rects[k] for k in rng.permutation(n)]


def guillotine_problem(seed, n, cap, horizon, shrink=0.0):
    """guillotine_rects as a Problem (byte alignment, one region); with `shrink`, each
    size cut by up to that fraction (random), so the tiling has slack."""
    t0, t1, a0, a1 = map(np.array, zip(*guillotine_rects(seed, n, cap, horizon)))
    rng = np.random.default_rng(seed)
    size = np.maximum(1, ((a1 - a0) * (1 - shrink * rng.random(n))).astype(np.int64))
    return Problem(0, cap, cap, cap, size=size, align=np.ones(n, np.int64), start=t0,
                   end=t1, region=np.zeros(n, np.int8))
