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

import random
import time
from bisect import bisect_left

import numpy as np

from .addrsearch import Budget
from .domain import first_at_or_above

INF = 1 << 62


class CanonicalSearch:
    def __init__(self, inst, cfg, deadline=None, skyline=None, budget=None):
        self.inst, self.cfg, self.deadline = inst, cfg, deadline
        n = inst.n
        self.nodes = 0
        self.budget = cfg.canonical_node_budget if budget is None else budget
        if self.budget <= 0:     # no node limit: the wall clock decides (CLI)
            self.budget = INF
        self.dominance, self.inference = cfg.dominance, cfg.section_inference
        self.base = min((w[0] for r in (0, 1) for w in inst.windows[r]), default=0)
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
        self.total0 = np.cumsum(tot)[:ns]
        self._reset()
        self.members = [[] for _ in range(ns)]
        for i in range(n):
            a, b = self.sec[i]
            for t in range(a, b):
                self.members[t].append(i)
        self.skyline = cfg.canonical_skyline if skyline is None else skyline
        self.decompose = cfg.decompose
        wins = sorted(w for r in (0, 1) for w in inst.windows[r])
        self.wl = np.array([w[0] for w in wins], np.int64)
        self.wh = np.array([w[1] for w in wins], np.int64)

    def _reset(self):
        inst, n, base = self.inst, self.inst.n, self.base
        self.floor = [base] * n
        self.minoff = [first_at_or_above(inst.dom0[i], base, inst.align[i]) for i in range(n)]
        self.minoff = [INF if m < 0 else m for m in self.minoff]
        self.addr = [-1] * n
        self.total = self.total0.copy()
        self.sfloor = np.full(len(self.total0), base, np.int64)

    def _free_above(self, x):
        return np.maximum(0, self.wh[None, :] - np.maximum(self.wl[None, :], x[:, None])).sum(1)

    def _raise(self, c, f, changes):
        """Lift request c's floor to f; False if it then has no legal start."""
        if f <= self.floor[c]:
            return True
        changes.append((c, self.floor[c], self.minoff[c]))
        self.floor[c] = f
        m = first_at_or_above(self.inst.dom0[c], f, self.inst.align[c])
        self.minoff[c] = INF if m < 0 else m
        return m >= 0

    def _infer_run(self, o, lo, hi, unplaced):
        """Section inference restricted to sections [lo, hi) and the unplaced
        requests living there (nothing else changes inside a run). The lowest
        minoff per section is painted highest-first, O(requests + spans), so a
        big tile never builds a sections x requests matrix per node."""
        if not unplaced:
            return True
        low = np.full(hi - lo, INF, np.int64)
        mo, sec = self.minoff, self.sec
        for c in sorted(unplaced, key=mo.__getitem__, reverse=True):
            a, b = sec[c]
            low[a - lo:b - lo] = mo[c]
        sf = self.sfloor[lo:hi]
        base = np.maximum(np.maximum(sf, o), np.where(low < INF, low, 0))
        return bool((self.total[lo:hi] <= self._free_above(base)).all())

    def _tick(self):
        self.nodes += 1
        if self.nodes > self.budget:
            raise Budget
        if self.deadline is not None and not self.nodes & 63 and time.perf_counter() > self.deadline:
            raise Budget

    def dfs_skyline(self, unplaced, lo, hi):
        """Skyline branching (`canonical_skyline`): at the leftmost section of the
        lowest floor f, either some request live there starts at f (one branch
        per candidate, each legal at f), or nothing ever will: the section's
        floor rises to the lowest start any of its requests could still take.
        Complete by the invariant "every unplaced request of a solution lies at or
        above the floor of each of its sections"; under zero slack the second
        branch dies at once, so the tree is the order of filling the skyline.

        Dynamic decomposition (`decompose`): once placements leave runs of
        sections separated by sections with nothing left to place, the runs are
        independent; each is solved on its own and a failure in one never
        backtracks into another's choices."""
        if not unplaced:
            return True
        tot = self.total[lo:hi] > 0
        if self.decompose:
            edges = np.flatnonzero(np.diff(np.concatenate([[0], tot.view(np.int8), [0]])))
            if len(edges) > 2:
                return self._split(unplaced, [(lo + int(a), lo + int(b))
                                              for a, b in zip(edges[::2], edges[1::2])])
        inst, minoff = self.inst, self.minoff
        wasted = []   # the "leave this floor empty" steps taken here, as a loop (no recursion)
        while True:
            masked = np.where(tot, self.sfloor[lo:hi], INF)
            ta = lo + int(np.argmin(masked))
            f = int(self.sfloor[ta])
            live = [c for c in self.members[ta] if self.addr[c] < 0]
            cands = [c for c in live if minoff[c] == f]
            if len(cands) > 1:
                cands.sort(key=self._fit_key(ta, f, lo, hi))
            for b in cands:
                self._tick()
                changes = []
                ok = self._place(b, f, changes)
                s0, s1 = self.sec[b]
                saved = self.sfloor[s0:s1].copy()
                self.sfloor[s0:s1] = f + inst.ext[b]
                self.total[s0:s1] -= inst.ext[b]
                rest = [c for c in unplaced if c != b]
                if ok and self.inference:
                    ok = self._infer_run(f, lo, hi, rest)
                if ok and self.dfs_skyline(rest, lo, hi):
                    return True
                self.total[s0:s1] += inst.ext[b]
                self.sfloor[s0:s1] = saved
                self._undo(b, changes)
            # waste branch: nothing starts at (ta, f); lift the section's floor
            self._tick()
            nxt = [first_at_or_above(inst.dom0[c], max(self.floor[c], f + 1), inst.align[c])
                   for c in live]
            if not nxt or min(nxt) < 0:
                break
            g = min(nxt)
            changes = []
            wasted.append((ta, int(self.sfloor[ta]), changes))
            self.sfloor[ta] = g
            ok = all(self._raise(c, g, changes) for c in live)
            if ok and self.inference:
                ok = self._infer_run(f, lo, hi, unplaced)
            if not ok:
                break
        for ta, old, changes in reversed(wasted):
            self.sfloor[ta] = old
            for c, fl, m in reversed(changes):
                self.floor[c], self.minoff[c] = fl, m
        return False

    def _fit_key(self, ta, f, lo, hi):
        """Candidate order at a skyline step [ta, tb) of height f: first those
        ending exactly at tb (they close the step), then those whose top meets
        the floor of the step's left or right neighbour (they flatten the
        skyline), then by preorder (big, long-lived first)."""
        sf = self.sfloor
        tb = ta
        while tb < hi and sf[tb] == f and self.total[tb] > 0:
            tb += 1
        left = int(sf[ta - 1]) if ta > lo else -1
        right = int(sf[tb]) if tb < hi else -1
        ext, sec, pre = self.inst.ext, self.sec, self.pre
        return lambda c: (sec[c][1] != tb, f + ext[c] not in (left, right), pre[c])

    def _split(self, unplaced, runs):
        snap = (list(self.addr), list(self.floor), list(self.minoff),
                self.sfloor.copy(), self.total.copy())
        sec = self.sec
        for a, b in runs:
            part = [c for c in unplaced if a <= sec[c][0] < b]
            if not self.dfs_skyline(part, a, b):
                self.addr, self.floor, self.minoff = snap[0], snap[1], snap[2]
                self.sfloor[:], self.total[:] = snap[3], snap[4]
                return False
        return True

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
                ok = self._infer_run(o, 0, len(self.total), [c for c in unplaced if c != b])
            if ok:
                rest = [c for c in unplaced if c != b]
                if self.dfs(rest, o, pre[b]):
                    return True
            self.total[s0:s1] += inst.ext[b]
            self.sfloor[s0:s1] = saved
            self._undo(b, changes)
        return False

    def run(self):
        """(addr or None, 'placed' | 'exhausted' | 'budget').

        Restarts (`canonical_restarts`): the search is complete but heavy-tailed
        (one early wrong choice at the bottom of the skyline is found late), so
        the budget is spent as attempts with geometrically growing node limits,
        attempt k > 0 breaking candidate ties in a different deterministic
        random order. An attempt that ends without hitting its limit has
        explored everything: that is the proof of infeasibility."""
        if any(m >= INF for m in self.minoff):
            return None, "exhausted"
        n = self.inst.n
        restarts = self.cfg.canonical_restarts
        limit = max(64, 2 * n) if restarts else self.budget
        pre0 = list(self.pre)
        attempt = 0
        total_budget = self.budget
        while True:
            self.budget = min(total_budget, self.nodes + limit)
            try:
                root = list(range(n))
                ok = (self.dfs_skyline(root, 0, len(self.total)) if self.skyline
                      else self.dfs(root, -1, -1))
                self.budget = total_budget
                if ok:
                    return list(self.addr), "placed"
                return None, "exhausted"
            except (Budget, RecursionError):
                self.budget = total_budget
                if not restarts or self.nodes >= total_budget:
                    return None, "budget"
                if self.deadline is not None and time.perf_counter() > self.deadline:
                    return None, "budget"
            attempt += 1
            limit = int(limit * 1.5)
            rng = random.Random(attempt)
            keys = [rng.random() for _ in range(n)]
            order = sorted(range(n), key=lambda i: (pre0[i] // max(1, n // 4), keys[i]))
            for r, i in enumerate(order):
                self.pre[i] = r
            self._reset()
