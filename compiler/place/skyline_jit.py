"""Compiled skyline search (`compiled_skyline`) for pure parts: one free window,
no bank edges (any alignment) - the lifetime x size problems of MiniMalloc's
benchmarks and of dumps from other compilers.

The same complete search as canonical.py's `dfs_skyline`, with the state as
flat int64 arrays and the node loop compiled by numba (a node costs ~microseconds
instead of ~0.5 ms in Python):

* state: per time section its floor `sf` (top of the highest request placed
  there, or raised by a waste branch) and `tot` (unplaced bytes live there);
  a request's lowest start is its alignment above the highest floor of its
  sections (canonical solutions: see canonical.py).
* node: at the leftmost section of the lowest floor f, branch on each request
  live there whose lowest start is f (closing the step first, then flattening
  the skyline, then by preorder), or on "nothing starts at f here" (the waste
  branch: that section's floor rises to the next lowest start).
* section inference (`section_inference`): in every section, the unplaced bytes
  must fit above max(floor, f, lowest start of a request live there).
* dynamic decomposition (`decompose`): sections with nothing left to place cut
  the run into independent runs, solved one after another; a failing run
  never backtracks into another's choices.
* hatless pruning (`hatless_pruning`, MiniMalloc's name): a request placed at
  f with nothing unplaced live beside it is where some solution has it (moving
  it down to f collides with nothing), so if that branch fails the node fails.

Exhausting the tree is a proof of infeasibility. The kernel stops after
`limit` nodes (returns -1); the caller spends its wall clock as restarts with
growing limits and varied tie-breaks (`canonical_restarts`).
"""
from __future__ import annotations

import threading

import numpy as np

try:
    from numba import njit
    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is a declared dependency
    HAVE_NUMBA = False

    def njit(**kw):
        return lambda f: f

INF = 1 << 62
STACK = 256 << 20


@njit(cache=True)
def minoff(c, sf, s0, s1, al):
    m = sf[s0[c]]
    for t in range(s0[c] + 1, s1[c]):
        if sf[t] > m:
            m = sf[t]
    a = al[c]
    return (m + a - 1) // a * a

@njit(cache=True)
def infer(lo, hi, f, sf, tot, addr, s0, s1, al, mptr, mlist, cap, low):
    for t in range(lo, hi):
        low[t] = INF
    for t in range(lo, hi):
        if tot[t] == 0:
            continue
        for k in range(mptr[t], mptr[t + 1]):
            c = mlist[k]
            if addr[c] >= 0 or s0[c] != t:
                continue       # each unplaced request once, at its first section
            m = minoff(c, sf, s0, s1, al)
            for u in range(s0[c], s1[c]):
                if m < low[u]:
                    low[u] = m
    for t in range(lo, hi):
        if tot[t] == 0:
            continue
        b = sf[t]
        if f > b:
            b = f
        if low[t] < INF and low[t] > b:
            b = low[t]
        if tot[t] + b > cap:
            return False
    return True

@njit(cache=True)
def dfs(lo, hi, sf, tot, addr, ext, al, s0, s1, pre, mptr, mlist, cap, low, st, flags):
    # st: [nodes, limit]; flags: [inference, decompose, hatless]
    # returns 1 placed (state left placed), 0 exhausted (state restored), -1 limit
    first = -1
    for t in range(lo, hi):
        if tot[t] > 0:
            first = t
            break
    if first < 0:
        return 1
    last = first
    for t in range(hi - 1, first - 1, -1):
        if tot[t] > 0:
            last = t
            break
    lo, hi = first, last + 1
    if flags[1]:
        # runs of sections with work left, cut by empty sections
        nrun = 0
        t = lo
        while t < hi:
            if tot[t] > 0:
                nrun += 1
                while t < hi and tot[t] > 0:
                    t += 1
            else:
                t += 1
        if nrun > 1:
            sf_save = sf[lo:hi].copy()
            tot_save = tot[lo:hi].copy()
            addr_save = addr.copy()
            t = lo
            while t < hi:
                if tot[t] > 0:
                    a = t
                    while t < hi and tot[t] > 0:
                        t += 1
                    r = dfs(a, t, sf, tot, addr, ext, al, s0, s1, pre, mptr, mlist, cap,
                            low, st, flags)
                    if r != 1:
                        if r == 0:
                            sf[lo:hi] = sf_save
                            tot[lo:hi] = tot_save
                            addr[:] = addr_save
                        return r
                else:
                    t += 1
            return 1
    # lowest, leftmost floor among sections with work left
    ta = -1
    f = INF
    for t in range(lo, hi):
        if tot[t] > 0 and sf[t] < f:
            f = sf[t]
            ta = t
    tb = ta
    while tb < hi and sf[tb] == f and tot[tb] > 0:
        tb += 1
    left = sf[ta - 1] if ta > lo else -1
    right = sf[tb] if tb < hi else -1
    nm = mptr[ta + 1] - mptr[ta]
    cand = np.empty(nm, np.int64)
    key = np.empty(nm, np.int64)
    nc = 0
    # waste branch bound: in a solution of this node minimising the unplaced
    # offsets, the lowest request above f in section ta starts at its own
    # lowest start, or on top of an unplaced request (whose floor is >= f):
    # at least f + the smallest unplaced extent
    minext = INF
    for c in range(len(ext)):
        if addr[c] < 0 and ext[c] < minext and s0[c] >= lo and s1[c] <= hi:
            minext = ext[c]
    nxt = INF
    for k in range(mptr[ta], mptr[ta + 1]):
        c = mlist[k]
        if addr[c] >= 0:
            continue
        m = minoff(c, sf, s0, s1, al)
        if m == f:
            if m + ext[c] <= cap:
                cand[nc] = c
                top = f + ext[c]
                key[nc] = (((s1[c] != tb) * 2 + (top != left and top != right)) << 40) + pre[c]
                nc += 1
            m2 = (f + minext + al[c] - 1) // al[c] * al[c]
        else:
            m2 = m
        if m2 + ext[c] <= cap and m2 < nxt:
            nxt = m2
    order = np.argsort(key[:nc])
    for q in range(nc):
        b = cand[order[q]]
        st[0] += 1
        if st[0] > st[1]:
            return -1
        a0, a1 = s0[b], s1[b]
        saved = sf[a0:a1].copy()
        addr[b] = f
        sf[a0:a1] = f + ext[b]
        hatless = True
        for t in range(a0, a1):
            tot[t] -= ext[b]
            if tot[t] > 0:
                hatless = False
        ok = True
        if flags[0]:
            ok = infer(lo, hi, f, sf, tot, addr, s0, s1, al, mptr, mlist, cap, low)
        if ok:
            r = dfs(lo, hi, sf, tot, addr, ext, al, s0, s1, pre, mptr, mlist, cap, low, st,
                    flags)
            if r != 0:
                return r
        for t in range(a0, a1):
            tot[t] += ext[b]
        sf[a0:a1] = saved
        addr[b] = -1
        if hatless and flags[2]:
            return 0
    # waste branch: nothing starts at f in section ta
    st[0] += 1
    if st[0] > st[1]:
        return -1
    if nxt >= INF:
        return 0
    old = sf[ta]
    sf[ta] = nxt
    ok = True
    if flags[0]:
        ok = infer(lo, hi, f, sf, tot, addr, s0, s1, al, mptr, mlist, cap, low)
    r = 0
    if ok:
        r = dfs(lo, hi, sf, tot, addr, ext, al, s0, s1, pre, mptr, mlist, cap, low, st, flags)
    if r == 0:
        sf[ta] = old
    return r





def pure(sub) -> bool:
    """One free window for every request and no bank edges."""
    wins = [w for r in (0, 1) for w in sub.windows[r]]
    return (HAVE_NUMBA and len(wins) == 1 and not any(sub.bank)
            and all(len(d) == 2 for d in sub.dom0))


class CompiledSkyline:
    """Pure-part skyline search; `run(limit, pre)` -> 1 placed, 0 exhausted, -1 limit."""

    def __init__(self, sub, cfg):
        n = sub.n
        (lo, hi), = [w for r in (0, 1) for w in sub.windows[r]]
        self.base, self.cap = lo, hi
        self.ext = np.array(sub.ext, np.int64)
        self.al = np.array(sub.align, np.int64)
        ev = np.unique(np.concatenate([sub.start, sub.end]))
        self.s0 = np.searchsorted(ev, np.array(sub.start, np.int64))
        self.s1 = np.searchsorted(ev, np.array(sub.end, np.int64))
        self.ns = max(1, len(ev) - 1)
        lens = self.s1 - self.s0
        rows = np.repeat(np.arange(n), lens)
        secs = np.concatenate([np.arange(a, b) for a, b in zip(self.s0, self.s1)]) if n else rows
        order = np.lexsort((rows, secs))
        self.mlist = rows[order].astype(np.int64)
        self.mptr = np.searchsorted(secs[order], np.arange(self.ns + 1)).astype(np.int64)
        tot = np.zeros(self.ns + 1, np.int64)
        np.add.at(tot, self.s0, self.ext)
        np.add.at(tot, self.s1, -self.ext)
        self.tot0 = np.cumsum(tot)[:self.ns]
        self.flags = np.array([cfg.section_inference, cfg.decompose, cfg.hatless_pruning], np.int64)
        self.nodes = 0
        self.n = n
        self.addr = None

    def run(self, limit: int, pre: np.ndarray) -> int:
        sf = np.full(self.ns, self.base, np.int64)
        tot = self.tot0.copy()
        addr = np.full(self.n, -1, np.int64)
        low = np.zeros(self.ns, np.int64)
        st = np.array([0, limit], np.int64)
        args = (0, self.ns, sf, tot, addr, self.ext, self.al, self.s0, self.s1,
                np.asarray(pre, np.int64), self.mptr, self.mlist, self.cap, low, st, self.flags)
        out = []
        # the kernel recurses once per placement and waste step: a thread with a
        # large stack keeps a 1000-request part far from the limit
        old = threading.stack_size(STACK)
        try:
            th = threading.Thread(target=lambda: out.append(dfs(*args)))
            th.start()
            th.join()
        finally:
            threading.stack_size(old)
        if not out:
            raise RuntimeError("compiled skyline kernel failed")   # never a false proof
        r = out[0]
        self.nodes += int(min(st[0], limit))
        if r == 1:
            self.addr = addr.tolist()
        return int(r)

    def preorders(self, seed: int) -> np.ndarray:
        """Tie-break ranks: attempt 0 area (size x lifetime), big first; then
        MiniMalloc's alternatives (sections x area, total x area), then seeded
        shuffles within quartiles of the area order."""
        area = self.ext * (self.s1 - self.s0)
        secs = self.s1 - self.s0
        idx = np.arange(self.n)
        if seed == 0:
            order = np.lexsort((idx, -self.ext, -area))
        elif seed == 1:
            order = np.lexsort((idx, -area, -secs))
        elif seed == 2:
            order = np.lexsort((idx, -secs, -self.ext))
        else:
            rng = np.random.default_rng(seed)
            base = np.lexsort((idx, -self.ext, -area))
            q = np.empty(self.n, np.int64)
            q[base] = np.arange(self.n) // max(1, self.n // 4)
            order = np.lexsort((rng.random(self.n), q))
        pre = np.empty(self.n, np.int64)
        pre[order] = np.arange(self.n)
        return pre
