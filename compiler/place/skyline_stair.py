"""Compiled skyline search over staircase-shaped bands (`stair_folds`).

skyline_jit.py's kernel places rectangles: a request covers [addr, addr + ext)
in every time section it lives in. A staircase band (stairfold.py) is several
requests at fixed offsets whose top differs from section to section: a cut
whose sides span several lifetime groups, stacked into one band, the longest-
lived at the bottom. Its bottom is flat (the band's offset), its top per
section is `hgt` (the highest member top live there, relative to the offset).
Covering it with its tallest rectangle would claim bytes nobody uses, which
near zero slack (~0.5 % free) makes the fold infeasible; so this kernel is the
same skyline search as skyline_jit.dfs with a height per (band, section):

* placing band b at floor f raises each of its sections' floor to f + hgt(b, t);
* section totals, the valley inference and the waste branch's bound use the
  height in that section (the bound: the band's smallest height, a lower bound);
* a band fits when f + its largest height <= cap.

Everything else - state, lowest starts (a flat bottom: the highest floor of its
sections), section inference, decomposition, hatless pruning - is skyline_jit's,
whose helpers this file calls. Only the skyline order is compiled: the stair
variants are near-zero-slack folds, where it is the strong one. A placement is
valid by construction (each band sits at or above every floor it covers, and
raises them to its own top), so the fold's restriction, not this kernel, is
what can be wrong; an exhausted fold proves nothing (search.py).
"""
from __future__ import annotations

import threading

import numpy as np

from . import skyline_jit as J
from .skyline_jit import INF, MAX_DEPTH, STACK, njit

if J.HAVE_NUMBA:
    from numba import types
    _A, _I = types.int64[::1], types.int64
    # P: ext (largest height), al, s0, s1, pre, mptr, mlist, optr, olist, hgt, hptr, minh
    SIG_STAIR = _I(_I, _I, types.UniTuple(_A, 7), types.UniTuple(_A, 12), _I, _A, _A)
else:  # pragma: no cover - numba is a declared dependency
    SIG_STAIR = None


@njit(cache=True)
def _p9(P):
    """The rectangle kernel's part of P (its helpers read these nine)."""
    return (P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8])


@njit(cache=True)
def _h(P, c, t):
    return P[9][P[10][c] + t - P[2][c]]


@njit(cache=True)
def _check(lo, hi, f, S, P, cap, valleys):
    """skyline_jit._check with each band's bytes in a section its height there."""
    sf, tot, addr, low = S[0], S[1], S[2], S[4]
    for t in range(lo, hi):
        if tot[t] == 0:
            continue
        b = max(sf[t], f, low[t])
        if tot[t] + b > cap:
            return False
    if not valleys:
        return True
    s0, s1, mptr, mlist = P[2], P[3], P[5], P[6]
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
                        x += _h(P, c, t)
                if x + w > cap:
                    return False
        a = e
    return True


@njit(cache=True)
def _take(b, lo, hi, f, S, P, cap, flags):
    """skyline_jit._take with band b's height per section."""
    sf, tot, addr, mo, low, stamp, cut = S
    s0, s1, optr, olist = P[2], P[3], P[7], P[8]
    a0, a1 = s0[b], s1[b]
    hatless = True
    for t in range(a0, a1):
        tot[t] -= _h(P, b, t)
        if tot[t] > 0:
            hatless = False
    for t in range(a0, a1 - 1):
        cut[t] -= 1
    trail_c, trail_t, cs = J._place_trails(_p9(P), b, len(sf))
    ncs = 0
    cs[ncs] = b
    ncs += 1
    for k in range(optr[b], optr[b + 1]):
        if addr[olist[k]] < 0:
            cs[ncs] = olist[k]
            ncs += 1
    ntc, ntt = J._refresh(cs, ncs, S, _p9(P), trail_c, trail_t)
    ok = True
    if flags[0]:
        ok = _check(lo, hi, f, S, P, cap, flags[4])
    return ok, hatless, trail_c, ntc, trail_t, ntt


@njit(cache=True)
def _give_back(b, S, P, trail_c, ntc, trail_t, ntt):
    tot, cut = S[1], S[6]
    s0, s1 = P[2], P[3]
    J._undo(S, trail_c, ntc, trail_t, ntt)
    for t in range(s0[b], s1[b]):
        tot[t] += _h(P, b, t)
    for t in range(s0[b], s1[b] - 1):
        cut[t] += 1


@njit(SIG_STAIR, cache=True)
def dfs(lo, hi, S, P, cap, st, flags):
    """skyline_jit.dfs over staircase bands (module docstring): 1 placed, 0
    exhausted, -1 a limit hit. st and flags as there."""
    if st[2] > st[3]:
        return -1
    sf, tot, addr, mo, low, stamp, cut = S
    ext, al, s0, s1, pre, mptr, mlist, optr, olist, hgt, hptr, minh = P
    ns = len(sf)
    lo, hi = J._live_span(lo, hi, tot)
    if lo < 0:
        return 1
    if flags[1]:
        runs = J._runs(lo, hi, tot, cut)
        if len(runs) > 2:
            saves = J._save(S)
            for q in range(0, len(runs), 2):
                st[2] += 1
                r = dfs(runs[q], runs[q + 1], S, P, cap, st, flags)
                st[2] -= 1
                if r != 1:
                    if r == 0:
                        J._restore(S, saves)
                    return r
            return 1
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
                top = f + _h(P, c, ta)
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
                    v = max(mo[e], f) + minh[e]
                    if v < lb:
                        lb = v
            if lb == INF:
                dead = True
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
        for t in range(a0, a1):
            sf[t] = f + hgt[hptr[b] + t - a0]
        ok, hatless, trail_c, ntc, trail_t, ntt = _take(b, lo, hi, f, S, P, cap, flags)
        if ok:
            st[2] += 1
            st[4] += 1
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
    ntc, ntt = J._refresh(cs, ncs, S, _p9(P), trail_c, trail_t)
    ok = True
    if flags[0]:
        ok = _check(lo, hi, f, S, P, cap, flags[4])
    r = 0
    if ok:
        st[2] += 1
        r = dfs(lo, hi, S, P, cap, st, flags)
        st[2] -= 1
    if r == 0:
        J._undo(S, trail_c, ntc, trail_t, ntt)
        sf[ta] = old
    return r


class StairSkyline(J.CompiledSkyline):
    """The compiled search of a StairFold (stairfold.py): its sections are the
    events of every member (a band's top changes there), each band's height per
    section from its members. Same interface as CompiledSkyline (run, preorders,
    nodes, n, addr)."""

    def __init__(self, fold, cfg):
        n = fold.n
        (lo, hi), = [w for r in (0, 1) for w in fold.windows[r]]
        self.base, self.cap = lo, hi
        self.al = np.array(fold.align, np.int64)
        ev = self._grid(fold)
        self.s0 = np.searchsorted(ev, np.array(fold.start, np.int64))
        self.s1 = np.searchsorted(ev, np.array(fold.end, np.int64))
        self.ns = max(1, len(ev) - 1)
        lens = self.s1 - self.s0
        self.hptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        self.hgt = np.zeros(int(self.hptr[-1]), np.int64)
        for k, (a, h) in enumerate(self._tops(fold, ev)):
            self.hgt[self.hptr[k]:self.hptr[k + 1]] = h
        self.ext = np.array([self.hgt[a:b].max() for a, b in zip(self.hptr[:-1], self.hptr[1:])],
                            np.int64)
        self.minh = np.array([self.hgt[a:b].min() for a, b in zip(self.hptr[:-1], self.hptr[1:])],
                             np.int64)
        rows = np.repeat(np.arange(n), lens)
        secs = np.concatenate([np.arange(a, b) for a, b in zip(self.s0, self.s1)])
        order = np.lexsort((rows, secs))
        self.mlist = rows[order].astype(np.int64)
        self.mptr = np.searchsorted(secs[order], np.arange(self.ns + 1)).astype(np.int64)
        self.tot0 = np.zeros(self.ns, np.int64)
        np.add.at(self.tot0, secs, self.hgt)
        self.flags = np.array([cfg.section_inference, cfg.decompose, cfg.hatless_pruning,
                               cfg.dominance, cfg.valley_inference], np.int64)
        ov = [np.asarray(fold.ov[i], np.int64) for i in range(n)]
        self.optr = np.concatenate([[0], np.cumsum([len(o) for o in ov])]).astype(np.int64)
        self.olist = np.concatenate(ov).astype(np.int64)
        width = np.diff(ev).astype(np.int64)
        self.area = np.array([int((self.hgt[a:b] * width[s:e]).sum()) for a, b, s, e in
                              zip(self.hptr[:-1], self.hptr[1:], self.s0, self.s1)], np.int64)
        self.total = np.array([self.tot0[a:b].max() for a, b in zip(self.s0, self.s1)], np.int64)
        self.nodes = 0
        self.n = n
        self.addr = None

    @staticmethod
    def _tops(fold, ev):
        """Per band (first section, its top per section of the grid ev)."""
        ms, me = np.searchsorted(ev, fold.mstart), np.searchsorted(ev, fold.mend)
        s0 = np.searchsorted(ev, np.array(fold.start, np.int64))
        s1 = np.searchsorted(ev, np.array(fold.end, np.int64))
        out = [(a, np.zeros(b - a, np.int64)) for a, b in zip(s0.tolist(), s1.tolist())]
        for i in range(len(fold.gid)):
            a, h = out[fold.gid[i]]
            np.maximum(h[ms[i] - a:me[i] - a], fold.rel[i] + fold.mext[i],
                       out=h[ms[i] - a:me[i] - a])
        return out

    @classmethod
    def _grid(cls, fold):
        """The events where a band starts or ends or some band's top changes (the
        members' other events split no section: fewer sections, fewer waste steps)."""
        ev = np.unique(np.concatenate([fold.mstart, fold.mend]))
        keep = set(np.searchsorted(ev, fold.start).tolist()) | set(
            np.searchsorted(ev, fold.end).tolist())
        for a, h in cls._tops(fold, ev):
            keep.update((a + np.flatnonzero(h[1:] != h[:-1]) + 1).tolist())
        return ev[sorted(keep)]

    def run(self, limit: int, pre: np.ndarray, skyline: bool = True) -> int:
        """As CompiledSkyline.run; the monotone order is not compiled here, so its
        turns (skyline False) search with the tie-break ranks reversed instead of
        repeating the skyline attempt."""
        ns, n = self.ns, self.n
        if not skyline:
            pre = n - 1 - np.asarray(pre, np.int64)
        sf = np.full(ns, self.base, np.int64)
        tot = self.tot0.copy()
        addr = np.full(n, -1, np.int64)
        mo = (self.base + self.al - 1) // self.al * self.al
        low = np.full(ns, INF, np.int64)
        np.minimum.at(low, np.repeat(np.arange(ns), np.diff(self.mptr)), mo[self.mlist])
        stamp = np.zeros(ns + 1, np.int64)
        cut = np.zeros(ns + 1, np.int64)
        np.add.at(cut, self.s0, 1)
        np.add.at(cut, self.s1 - 1, -1)
        cut = np.cumsum(cut)[:ns]
        S = (sf, tot, addr, mo, low, stamp, cut)
        P = (self.ext, self.al, self.s0, self.s1, np.asarray(pre, np.int64), self.mptr,
             self.mlist, self.optr, self.olist, self.hgt, self.hptr, self.minh)
        st = np.array([0, limit, 0, MAX_DEPTH, 0, 0], np.int64)
        out = []
        old = threading.stack_size(STACK)
        try:
            th = threading.Thread(target=lambda: out.append(dfs(0, ns, S, P, self.cap, st,
                                                                self.flags)))
            th.start()
            th.join()
        finally:
            threading.stack_size(old)
        if not out:
            raise RuntimeError("compiled stair kernel failed")
        r = out[0]
        self.nodes += int(min(st[0], limit))
        self.deepest = int(st[5])
        if r == 1:
            self.addr = addr.tolist()
        return int(r)
