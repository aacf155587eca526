"""Canonical search: the ideas of MiniMalloc (Moffitt, ASPLOS 2023), re-derived
for our constraints (static legality, bank units). No code is taken from it.

Canonical solutions. Take a legal placement minimising the sum of start
addresses. Sort it by (address, preorder). Each request then sits at the lowest
legal start at or above its "floor": the highest top of the earlier,
lifetime-overlapping requests, or for a bank neighbour the top of the last
unit it touches. (Otherwise it could be lowered, reducing the sum: lowering
cannot collide with a later request, whose bytes lie above, nor with a later
bank neighbour, whose units lie above every unit the request touched before.)
So the search places requests in non-decreasing (address, preorder) order, each
at that lowest start (`minoff`), and is complete: exhausting it is a proof of
infeasibility (differentially tested against CP-SAT).

Dominance (`dominance`): placing b at o is pointless while some unplaced c
could sit entirely below o at its own minoff: lowering c there would reduce
the sum. For a c with bank neighbours the gap must also clear a unit boundary
(c's last unit ends at or below o), otherwise a later neighbour could share it.

Section inference (`section_inference`): every unplaced request live in a time
section lands at or above max(o, the section's floor), pairwise disjoint, so
their total extent must fit in the free bytes above it.
"""
from __future__ import annotations

import time
from bisect import bisect_left

import numpy as np

from .addrsearch import Budget
from .domain import first_at_or_above

INF = 1 << 62


class CanonicalSearch:
    def __init__(self, inst, cfg, deadline=None):
        self.inst, self.cfg, self.deadline = inst, cfg, deadline
        n = inst.n
        self.nodes = 0
        self.budget = cfg.canonical_node_budget
        self.dominance, self.inference = cfg.dominance, cfg.section_inference
        base = min((w[0] for r in (0, 1) for w in inst.windows[r]), default=0)
        self.floor = [base] * n
        self.minoff = [first_at_or_above(inst.dom0[i], base, inst.align[i]) for i in range(n)]
        self.minoff = [INF if m < 0 else m for m in self.minoff]
        self.addr = [-1] * n
        self.has_bank = [bool(b) for b in inst.bank]
        # preorder: big, long-lived requests first among equal offsets
        order = sorted(range(n), key=lambda i: (-inst.ext[i] * (inst.end[i] - inst.start[i]),
                                                -inst.ext[i], i))
        self.pre = [0] * n
        for r, i in enumerate(order):
            self.pre[i] = r
        # time sections between consecutive event points
        ev = sorted(set(inst.start) | set(inst.end))
        self.sec = [(bisect_left(ev, inst.start[i]), bisect_left(ev, inst.end[i])) for i in range(n)]
        ns = max(1, len(ev) - 1)
        tot = np.zeros(ns + 1, np.int64)
        for i in range(n):
            a, b = self.sec[i]
            tot[a] += inst.ext[i]
            tot[b] -= inst.ext[i]
        self.total = np.cumsum(tot)[:ns]
        self.sfloor = np.full(ns, base, np.int64)
        wins = sorted(w for r in (0, 1) for w in inst.windows[r])
        self.wl = np.array([w[0] for w in wins], np.int64)
        self.wh = np.array([w[1] for w in wins], np.int64)

    def _free_above(self, x):
        return np.maximum(0, self.wh[None, :] - np.maximum(self.wl[None, :], x[:, None])).sum(1)

    def _height(self, c):
        m = self.minoff[c]
        top = m + self.inst.ext[c]
        if self.has_bank[c]:
            return self.inst.unit_span(top - 1, 1)[1]
        return top

    def _place(self, b, o, changes):
        """Place b at o; update neighbours' floors/minoffs. False on a dead end."""
        inst = self.inst
        e = inst.ext[b]
        top = o + e
        uhi = inst.unit_span(o, e)[1] if inst.bank[b] else top
        self.addr[b] = o
        ok = True
        bb = inst.bank[b]
        for c in inst.ov[b]:
            if self.addr[c] >= 0:
                continue
            f = uhi if c in bb else top
            if f > self.floor[c]:
                changes.append((c, self.floor[c], self.minoff[c]))
                self.floor[c] = f
                m = first_at_or_above(inst.dom0[c], f, inst.align[c])
                self.minoff[c] = INF if m < 0 else m
                if m < 0:
                    ok = False
        return ok

    def _undo(self, b, changes):
        self.addr[b] = -1
        for c, f, m in reversed(changes):
            self.floor[c], self.minoff[c] = f, m

    def dfs(self, unplaced, L, lastpre):
        if not unplaced:
            return True
        minoff, pre = self.minoff, self.pre
        if self.dominance:
            mh = min(self._height(c) for c in unplaced)
        else:
            mh = INF
        cands = [c for c in unplaced
                 if minoff[c] < mh and (minoff[c] > L or (minoff[c] == L and pre[c] > lastpre))]
        cands.sort(key=lambda c: (minoff[c], pre[c]))
        inst = self.inst
        for b in cands:
            self.nodes += 1
            if self.nodes > self.budget:
                raise Budget
            if self.deadline is not None and not self.nodes & 63 and time.perf_counter() > self.deadline:
                raise Budget
            o = minoff[b]
            changes = []
            ok = self._place(b, o, changes)
            s0, s1 = self.sec[b]
            saved = self.sfloor[s0:s1].copy()
            self.sfloor[s0:s1] = o + inst.ext[b]
            self.total[s0:s1] -= inst.ext[b]
            if ok and self.inference:
                base = np.maximum(self.sfloor, o)
                ok = bool((self.total <= self._free_above(base)).all())
            if ok:
                rest = [c for c in unplaced if c != b]
                if self.dfs(rest, o, pre[b]):
                    return True
            self.total[s0:s1] += inst.ext[b]
            self.sfloor[s0:s1] = saved
            self._undo(b, changes)
        return False

    def run(self):
        """(addr or None, 'placed' | 'exhausted' | 'budget')."""
        if any(m >= INF for m in self.minoff):
            return None, "exhausted"
        try:
            if self.dfs(list(range(self.inst.n)), -1, -1):
                return list(self.addr), "placed"
            return None, "exhausted"
        except Budget:
            return None, "budget"
