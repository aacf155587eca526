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
  must fit above max(floor, f, lowest start of a request live there); valley
  inference (`valley_inference`): in a plateau with higher floors on both
  sides, the bytes of requests leaving it fit above the lower wall.
* waste branch bound: the floor rises to the lowest top of an unplaced request
  overlapping one live in the section (never by the globally smallest extent).
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
    from ..numba_probe import njit, types    # numba without its scipy.linalg probe
    HAVE_NUMBA = True
    _A = types.int64[::1]
    _I = types.int64
    _S, _P = types.UniTuple(_A, 7), types.UniTuple(_A, 9)
    # explicit signatures for the recursive kernels (see below)
    SIG_DFS = _I(_I, _I, _S, _P, _I, _A, _A)
    SIG_MONO = _I(_I, _I, _I, _I, _S, _P, _I, _A, _A)
except ImportError:  # pragma: no cover - numba is a declared dependency
    HAVE_NUMBA = False
    SIG_DFS = SIG_MONO = None

    def njit(*a, **kw):
        return lambda f: f

INF = 1 << 62
STACK = 512 << 20       # the kernels recurse per placement and per waste step;
MAX_DEPTH = 60_000      # deeper than this an attempt ends without a verdict


@njit(cache=True)
def _minoff(c, sf, s0, s1, al):
    m = sf[s0[c]]
    for t in range(s0[c] + 1, s1[c]):
        if sf[t] > m:
            m = sf[t]
    a = al[c]
    return (m + a - 1) // a * a


@njit(cache=True)
def _refresh(cs, nc, S, P, trail_c, trail_t):
    """After floors changed under requests cs[:nc] (and placements): recompute
    their lowest starts `mo`, and `low` (the lowest start of an unplaced
    request, per section) on the sections of every request whose `mo` changed.
    Old values go on the trails (returned as counts) for undo."""
    sf, tot, addr, mo, low, stamp, cut = S
    ext, al, s0, s1, pre, mptr, mlist, optr, olist = P
    ntc = 0
    ntt = 0
    stamp[0] += 1
    mark = stamp[0]
    for q in range(nc):
        c = cs[q]
        if addr[c] >= 0:
            new = INF          # placed: leaves every section's minimum
        else:
            new = _minoff(c, sf, s0, s1, al)
        if new == mo[c]:
            continue
        trail_c[2 * ntc] = c
        trail_c[2 * ntc + 1] = mo[c]
        ntc += 1
        mo[c] = new
        for t in range(s0[c], s1[c]):
            if stamp[1 + t] == mark:
                continue
            stamp[1 + t] = mark
            trail_t[2 * ntt] = t
            trail_t[2 * ntt + 1] = low[t]
            ntt += 1
            m = INF
            for k in range(mptr[t], mptr[t + 1]):
                d = mlist[k]
                if mo[d] < m:
                    m = mo[d]
            low[t] = m
    return ntc, ntt


@njit(cache=True)
def _undo(S, trail_c, ntc, trail_t, ntt):
    mo, low = S[3], S[4]
    for q in range(ntt - 1, -1, -1):
        low[trail_t[2 * q]] = trail_t[2 * q + 1]
    for q in range(ntc - 1, -1, -1):
        mo[trail_c[2 * q]] = trail_c[2 * q + 1]


@njit(cache=True)
def _check(lo, hi, f, S, P, cap, valleys):
    """Section inference: the unplaced bytes of each section fit above the
    highest of its floor, f and the lowest start of a request live there.
    Valley inference (`valleys`): in a plateau of equal floors [a, b) with a
    higher floor (or the run's edge) on both sides, a request live in it that
    also lives outside it sits above that side's floor, so per section the
    bytes of such requests fit above the lower of the two walls. Not implied
    by section inference (left- and right-crossing bytes sum in no one section)."""
    sf, tot, addr, low = S[0], S[1], S[2], S[4]
    for t in range(lo, hi):
        if tot[t] == 0:
            continue
        b = sf[t]
        if f > b:
            b = f
        if low[t] > b:
            b = low[t]
        if tot[t] + b > cap:
            return False
    if not valleys:
        return True
    ext, s0, s1, mptr, mlist = P[0], P[2], P[3], P[5], P[6]
    a = lo
    while a < hi:
        if tot[a] == 0:
            a += 1
            continue
        e = a + 1
        while e < hi and tot[e] > 0 and sf[e] == sf[a]:
            e += 1
        wl = sf[a - 1] if a > lo and tot[a - 1] > 0 else INF
        wr = sf[e] if e < hi and tot[e] > 0 else INF
        w = min(wl, wr)
        if w > sf[a] and w < INF:
            for t in range(a, e):
                x = 0
                for k in range(mptr[t], mptr[t + 1]):
                    c = mlist[k]
                    if addr[c] < 0 and (s0[c] < a or s1[c] > e):
                        x += ext[c]
                if x + w > cap:
                    return False
        a = e
    return True


@njit(cache=True)
def _place_trails(P, b, n):
    optr = P[7]
    k = optr[b + 1] - optr[b] + 1
    return np.empty(2 * k, np.int64), np.empty(2 * n + 2, np.int64), np.empty(k, np.int64)


@njit(cache=True)
def _runs(lo, hi, tot, cut):
    """MiniMalloc's dynamic decomposition: section boundaries no unplaced request
    crosses (cut == 0) split [lo, hi) into runs sharing only placed requests.
    Returns [a0, b0, a1, b1, ...] of the runs with work left."""
    out = np.empty(2 * (hi - lo), np.int64)
    k = 0
    t = lo
    while t < hi:
        a = t
        work = False
        while True:
            if tot[t] > 0:
                work = True
            t += 1
            if t >= hi or cut[t - 1] == 0:
                break
        if work:
            out[k] = a
            out[k + 1] = t
            k += 2
    return out[:k]


@njit(cache=True)
def _save(S):
    return (S[0].copy(), S[1].copy(), S[2].copy(), S[3].copy(), S[4].copy(), S[6].copy())


@njit(cache=True)
def _restore(S, saves):
    S[0][:] = saves[0]
    S[1][:] = saves[1]
    S[2][:] = saves[2]
    S[3][:] = saves[3]
    S[4][:] = saves[4]
    S[6][:] = saves[5]


@njit(cache=True)
def _live_span(lo, hi, tot):
    """[first, last + 1) of the sections in [lo, hi) with unplaced requests (tot > 0);
    (-1, -1) when none has any."""
    for first in range(lo, hi):
        if tot[first] > 0:
            for last in range(hi - 1, first - 1, -1):
                if tot[last] > 0:
                    return first, last + 1
    return -1, -1


@njit(cache=True)
def _take(b, lo, hi, f, S, P, cap, flags):
    """Request b just placed (its address and the floors set by the caller): its bytes
    leave its sections' totals, its lifetime no longer crosses their boundaries, the
    lowest starts of b and its unplaced overlaps are refreshed, then inference on the
    run [lo, hi) at floor f. Returns (ok, hatless: nothing else live where b is, and
    the trails `_give_back` needs)."""
    sf, tot, addr, mo, low, stamp, cut = S
    ext, al, s0, s1, pre, mptr, mlist, optr, olist = P
    a0, a1 = s0[b], s1[b]
    hatless = True
    for t in range(a0, a1):
        tot[t] -= ext[b]
        if tot[t] > 0:
            hatless = False
    for t in range(a0, a1 - 1):
        cut[t] -= 1
    trail_c, trail_t, cs = _place_trails(P, b, len(sf))
    ncs = 0
    cs[ncs] = b
    ncs += 1
    for k in range(optr[b], optr[b + 1]):
        if addr[olist[k]] < 0:
            cs[ncs] = olist[k]
            ncs += 1
    ntc, ntt = _refresh(cs, ncs, S, P, trail_c, trail_t)
    ok = True
    if flags[0]:
        ok = _check(lo, hi, f, S, P, cap, flags[4])
    return ok, hatless, trail_c, ntc, trail_t, ntt


@njit(cache=True)
def _give_back(b, S, P, trail_c, ntc, trail_t, ntt):
    """Undo `_take` (the caller restores b's address and the floors)."""
    tot, cut = S[1], S[6]
    ext, s0, s1 = P[0], P[2], P[3]
    _undo(S, trail_c, ntc, trail_t, ntt)
    for t in range(s0[b], s1[b]):
        tot[t] += ext[b]
    for t in range(s0[b], s1[b] - 1):
        cut[t] += 1


# The two recursive kernels are cached on disk like their helpers, compiled
# eagerly from explicit signatures at import. numba 0.68 segfaults loading a
# cached recursive function whose recursive call passes a literal constant, so
# those arguments are typed values (np.int64(-1)). Cold: ~15 s idle; cached: ~2 s.
@njit(SIG_DFS, cache=True)
def dfs(lo, hi, S, P, cap, st, flags):
    """st: [nodes, node limit, depth, depth limit, placed, most placed]; flags: [inference,
    decompose, hatless, dominance, valley inference]. 1 placed (state left placed), 0 exhausted
    (state restored), -1 a limit hit (no verdict)."""
    if st[2] > st[3]:
        return -1
    sf, tot, addr, mo, low, stamp, cut = S
    ext, al, s0, s1, pre, mptr, mlist, optr, olist = P
    ns = len(sf)
    lo, hi = _live_span(lo, hi, tot)
    if lo < 0:
        return 1
    if flags[1]:
        # MiniMalloc's dynamic decomposition: section boundaries no unplaced
        # request crosses (cut == 0) split the sections into runs that share
        # only placed requests: each run is solved on its own
        runs = _runs(lo, hi, tot, cut)
        if len(runs) > 2:
            saves = _save(S)
            for q in range(0, len(runs), 2):
                st[2] += 1
                r = dfs(runs[q], runs[q + 1], S, P, cap, st, flags)
                st[2] -= 1
                if r != 1:
                    if r == 0:
                        _restore(S, saves)
                    return r
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
    # offsets, the lowest request c above f in section ta starts at its own
    # lowest start (> f), or on top of an unplaced request d overlapping it
    # in time (placed ones end at or below f there): at least max(mo[d], f) +
    # ext[d]. Only c's own overlaps count: a global smallest extent (a 1-byte
    # sliver elsewhere) would step the floor a byte at a time.
    nxt = INF
    dead = False
    for k in range(mptr[ta], mptr[ta + 1]):
        c = mlist[k]
        if addr[c] >= 0:
            continue
        m = mo[c]
        if m == f:
            if m + ext[c] <= cap:
                cand[nc] = c
                top = f + ext[c]
                # closing the step first, then the top nearest a neighbour's floor
                # (0: flush, as at zero slack; small: a near fit under slack)
                d = INF
                if left >= 0:
                    d = abs(top - left)
                if right >= 0 and abs(top - right) < d:
                    d = abs(top - right)
                d = min(d, (1 << 21) - 1)
                key[nc] = ((((s1[c] != tb) << 21) + d) << 21) + pre[c]
                nc += 1
            lb = INF
            for k2 in range(optr[c], optr[c + 1]):
                e = olist[k2]
                if addr[e] < 0:
                    v = max(mo[e], f) + ext[e]
                    if v < lb:
                        lb = v
            if lb == INF:
                dead = True    # c has nothing to rest on above f: the waste branch fails
            m2 = (lb + al[c] - 1) // al[c] * al[c] if lb < INF else INF
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
        ok, hatless, trail_c, ntc, trail_t, ntt = _take(b, lo, hi, f, S, P, cap, flags)
        if ok:
            st[2] += 1
            st[4] += 1          # placed on this path; st[5] its maximum
            if st[4] > st[5]:
                st[5] = st[4]
            r = dfs(lo, hi, S, P, cap, st, flags)
            st[2] -= 1
            st[4] -= 1
            if r != 0:
                return r
        _give_back(b, S, P, trail_c, ntc, trail_t, ntt)
        sf[a0:a1] = saved
        addr[b] = -1
        if hatless and flags[2]:
            return 0
    # waste branch: nothing starts at f in section ta
    st[0] += 1
    if st[0] > st[1]:
        return -1
    if nxt >= INF or dead:
        return 0
    old = sf[ta]
    sf[ta] = nxt
    cs = np.empty(nm, np.int64)
    ncs = 0
    for k in range(mptr[ta], mptr[ta + 1]):
        if addr[mlist[k]] < 0:
            cs[ncs] = mlist[k]
            ncs += 1
    trail_c = np.empty(2 * nm, np.int64)
    trail_t = np.empty(2 * ns + 2, np.int64)
    ntc, ntt = _refresh(cs, ncs, S, P, trail_c, trail_t)
    ok = True
    if flags[0]:
        ok = _check(lo, hi, f, S, P, cap, flags[4])
    r = 0
    if ok:
        st[2] += 1
        r = dfs(lo, hi, S, P, cap, st, flags)
        st[2] -= 1
    if r == 0:
        _undo(S, trail_c, ntc, trail_t, ntt)
        sf[ta] = old
    return r


@njit(SIG_MONO, cache=True)
def dfs_mono(lo, hi, L, lastpre, S, P, cap, st, flags):
    """MiniMalloc's order (canonical.py `dfs`): requests placed in non-decreasing
    (lowest start, preorder), each at its lowest start; dominance: nothing
    starts at or above the lowest top any unplaced request could reach (the
    gap below would hold it). Same state, inference and decomposition as `dfs`."""
    if st[2] > st[3]:
        return -1
    sf, tot, addr, mo, low, stamp, cut = S
    ext, al, s0, s1, pre, mptr, mlist, optr, olist = P
    n = len(ext)
    lo, hi = _live_span(lo, hi, tot)
    if lo < 0:
        return 1
    if flags[1]:
        runs = _runs(lo, hi, tot, cut)
        if len(runs) > 2:
            saves = _save(S)
            for q in range(0, len(runs), 2):
                st[2] += 1
                r = dfs_mono(runs[q], runs[q + 1], np.int64(-1), np.int64(-1), S, P, cap, st, flags)
                st[2] -= 1
                if r != 1:
                    if r == 0:
                        _restore(S, saves)
                    return r
            return 1
    mh = INF
    for c in range(n):
        if addr[c] < 0 and s0[c] >= lo and s0[c] < hi and mo[c] + ext[c] < mh:
            mh = mo[c] + ext[c]
    if not flags[3]:
        mh = INF
    cand = np.empty(n, np.int64)
    key = np.empty(n, np.int64)
    nc = 0
    for c in range(n):
        if addr[c] >= 0 or s0[c] < lo or s0[c] >= hi:
            continue
        m = mo[c]
        if m >= mh or m + ext[c] > cap:
            continue
        if m < L or (m == L and pre[c] <= lastpre):
            continue
        cand[nc] = c
        key[nc] = (m << 20) + pre[c]
        nc += 1
    order = np.argsort(key[:nc])
    for q in range(nc):
        b = cand[order[q]]
        st[0] += 1
        if st[0] > st[1]:
            return -1
        o = mo[b]
        a0, a1 = s0[b], s1[b]
        saved = sf[a0:a1].copy()
        addr[b] = o
        for t in range(a0, a1):
            if o + ext[b] > sf[t]:
                sf[t] = o + ext[b]
        ok, _, trail_c, ntc, trail_t, ntt = _take(b, lo, hi, o, S, P, cap, flags)
        if ok:
            st[2] += 1
            st[4] += 1          # placed on this path; st[5] its maximum
            if st[4] > st[5]:
                st[5] = st[4]
            r = dfs_mono(lo, hi, o, pre[b], S, P, cap, st, flags)
            st[2] -= 1
            st[4] -= 1
            if r != 0:
                return r
        _give_back(b, S, P, trail_c, ntc, trail_t, ntt)
        sf[a0:a1] = saved
        addr[b] = -1
    return 0


_WARM = []


def warm() -> float:
    """Compile (or load from numba's cache) both kernels on a two-request
    problem; seconds spent. Callers do this before their clock starts, so a
    first run's compilation never eats a case's time limit."""
    if _WARM or not HAVE_NUMBA:
        return 0.0
    import time

    from .instance import Instance
    from .problem import Problem
    t = time.perf_counter()
    p = Problem(0, 8, 8, 8, size=[4, 4], align=[1, 1], start=[0, 0], end=[1, 1], region=[0, 0])
    cs = CompiledSkyline(Instance(p), _Flags())
    for sky in (True, False):
        cs.run(100, cs.preorders(0), sky)
    _WARM.append(time.perf_counter() - t)
    return _WARM[0]


class _Flags:
    section_inference = decompose = hatless_pruning = dominance = valley_inference = True


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
        self.flags = np.array([cfg.section_inference, cfg.decompose, cfg.hatless_pruning,
                               cfg.dominance, cfg.valley_inference], np.int64)
        ov = [np.asarray(sub.ov[i], np.int64) for i in range(n)]
        self.optr = np.concatenate([[0], np.cumsum([len(o) for o in ov])]).astype(np.int64)
        self.olist = np.concatenate(ov).astype(np.int64) if n else np.zeros(0, np.int64)
        self.area = self.ext * (np.array(sub.end, np.int64) - np.array(sub.start, np.int64))
        self.total = np.array([self.tot0[a:b].max() for a, b in zip(self.s0, self.s1)], np.int64)
        self.nodes = 0
        self.n = n
        self.addr = None

    def run(self, limit: int, pre: np.ndarray, skyline: bool = True) -> int:
        """After a limit (-1) `partial` is the path's placement then (-1: unplaced;
        repair_profile.py: how far a stalled search got)."""
        ns, n = self.ns, self.n
        sf = np.full(ns, self.base, np.int64)
        tot = self.tot0.copy()
        addr = np.full(n, -1, np.int64)
        mo = (self.base + self.al - 1) // self.al * self.al
        low = np.full(ns, INF, np.int64)
        np.minimum.at(low, np.repeat(np.arange(ns), np.diff(self.mptr)), mo[self.mlist])
        stamp = np.zeros(ns + 1, np.int64)
        cut = np.zeros(ns + 1, np.int64)       # unplaced requests crossing boundary t|t+1
        np.add.at(cut, self.s0, 1)
        np.add.at(cut, self.s1 - 1, -1)
        cut = np.cumsum(cut)[:ns]
        S = (sf, tot, addr, mo, low, stamp, cut)
        P = (self.ext, self.al, self.s0, self.s1, np.asarray(pre, np.int64), self.mptr,
             self.mlist, self.optr, self.olist)
        st = np.array([0, limit, 0, MAX_DEPTH, 0, 0], np.int64)
        out = []
        # the kernel recurses once per placement and waste step: a thread with a
        # large stack keeps a 1000-request part far from the limit
        old = threading.stack_size(STACK)
        try:
            th = threading.Thread(target=lambda: out.append(
                dfs(0, ns, S, P, self.cap, st, self.flags) if skyline else
                dfs_mono(0, ns, -1, -1, S, P, self.cap, st, self.flags)))
            th.start()
            th.join()
        finally:
            threading.stack_size(old)
        if not out:
            raise RuntimeError("compiled skyline kernel failed")   # never a false proof
        r = out[0]
        self.nodes += int(min(st[0], limit))
        self.deepest = int(st[5])
        if r == 1:
            self.addr = addr.tolist()
        self.partial = addr if r == -1 else None
        return int(r)

    def preorders(self, seed: int) -> np.ndarray:
        """Tie-break ranks, attempt by attempt: 0 area (size x lifetime), big
        first (canonical.py's preorder); 1-3 MiniMalloc's WAT, TAW, TWA (W
        sections spanned, A area, T the largest section total it lives in);
        then seeded shuffles within quartiles of the area order."""
        area, secs, total = self.area, self.s1 - self.s0, self.total
        idx = np.arange(self.n)
        keys = {0: (idx, -self.ext, -area), 1: (idx, -total, -area, -secs),
                2: (idx, -secs, -area, -total), 3: (idx, -area, -secs, -total)}
        if seed in keys:
            order = np.lexsort(keys[seed])
        else:
            rng = np.random.default_rng(seed)
            base = np.lexsort(keys[0])
            q = np.empty(self.n, np.int64)
            q[base] = np.arange(self.n) // max(1, self.n // 4)
            order = np.lexsort((rng.random(self.n), q))
        pre = np.empty(self.n, np.int64)
        pre[order] = np.arange(self.n)
        return pre
