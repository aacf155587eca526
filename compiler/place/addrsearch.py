"""Address-domain search (seeds/placement-search.md, "Implemented address-domain
search"), plus must-occupy propagation.

Every unassigned request keeps its domain of legal starts (domain.py). Placing
request i at a subtracts [a, a+e_i) from every lifetime-overlapping request's
domain and i's whole bank units from every bank-conflicting one; an empty
domain backtracks at once. Branching picks the request with the least slack
(domain measure relative to its extent), preferring requests that survive to
completion, and tries hole edges (both ends of every domain interval), element
(unit) starts and starts that end on a unit boundary: so a later bank is tried
even when the first hole fits. Deterministic; budgets are nodes and domain
filter operations.

Must-occupy propagation (`must_occupy_propagation`): whatever its final
address, an unassigned request with starts in [smin, smax] covers the bytes
[smax, smin + e) and the units U(smax) .. U(smin + e - 1). Those are
subtracted from its neighbours' domains exactly as if it were placed, and the
subtraction can shrink the neighbours' own domains in turn (to a fixpoint).
The value set is a sample, so exhausting it proves nothing: UNKNOWN.
"""
from __future__ import annotations

import random
import sys
import time

from .domain import last, measure, subtract

sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))


class Budget(Exception):
    pass


class AddressSearch:
    def __init__(self, inst, cfg, deadline=None):
        self.inst, self.cfg, self.deadline = inst, cfg, deadline
        n = inst.n
        self.dom = list(inst.dom0)
        self.addr = [-1] * n
        self.comp = [None] * n
        self.trail = []
        self.nodes = self.filters = 0
        self.must = cfg.must_occupy_propagation
        self.node_budget, self.filter_budget = cfg.search_node_budget, cfg.search_filter_budget

    # ---- propagation -----------------------------------------------------------
    def _cut(self, j, x, y, queue):
        d = self.dom[j]
        self.filters += 1
        nd = subtract(d, x, y, self.inst.align[j])
        if nd is d:
            return True
        self.trail.append((0, j, d))
        self.dom[j] = nd
        if not nd:
            return False
        if self.must:
            self._compulsory(j, queue)
        return True

    def _compulsory(self, j, queue):
        """Record (and queue for propagation) what j covers at every legal start."""
        inst, d = self.inst, self.dom[j]
        e = inst.ext[j]
        smin, smax = d[0], last(d, inst.align[j])
        blo, bhi = smax, smin + e
        u1, u2 = inst.unit(smax), inst.unit(smin + e - 1)
        c = (blo, bhi, inst.ub[u1], inst.ub[u2 + 1]) if u1 <= u2 else (blo, bhi, 0, 0)
        if c[0] >= c[1] and c[2] >= c[3]:
            return
        if c != self.comp[j]:
            self.trail.append((1, j, self.comp[j]))
            self.comp[j] = c
            queue.append(j)

    def _propagate(self, queue):
        inst, addr, dom = self.inst, self.addr, self.dom
        ext, bank = inst.ext, inst.bank
        k = 0
        while k < len(queue):
            j = queue[k]
            k += 1
            blo, bhi, ulo, uhi = self.comp[j]
            bj = bank[j]
            for o in inst.ov[j]:
                if addr[o] >= 0 or not dom[o]:
                    continue
                if o in bj:
                    if ulo < uhi and not self._cut(o, ulo - ext[o] + 1, uhi, queue):
                        return False
                elif blo < bhi and not self._cut(o, blo - ext[o] + 1, bhi, queue):
                    return False
            if self.filters > self.filter_budget:
                raise Budget
        return True

    def assign(self, i, a):
        self.trail.append((2, i, None))
        self.addr[i] = a
        self.trail.append((0, i, self.dom[i]))
        self.dom[i] = [a, a + 1]
        e = self.inst.ext[i]
        ulo, uhi = self.inst.unit_span(a, e)
        self.trail.append((1, i, self.comp[i]))
        self.comp[i] = (a, a + e, ulo, uhi)
        return self._propagate([i])

    def undo(self, mark):
        tr = self.trail
        while len(tr) > mark:
            kind, j, old = tr.pop()
            if kind == 0:
                self.dom[j] = old
            elif kind == 1:
                self.comp[j] = old
            else:
                self.addr[j] = -1

    # ---- branching -----------------------------------------------------------------
    def choose(self):
        inst, best, bk = self.inst, -1, None
        T, w = inst.t_end, self.weight
        for i in range(inst.n):
            if self.addr[i] < 0:
                k = (measure(self.dom[i]) / inst.ext[i] * w[i], inst.end[i] != T, -inst.ext[i], i)
                if bk is None or k < bk:
                    best, bk = i, k
        return best

    def values(self, i):
        inst, d = self.inst, self.dom[i]
        al, e, ub = inst.align[i], inst.ext[i], inst.ub
        vals = set()
        for t in range(0, len(d), 2):
            lo, hi = d[t], d[t + 1]
            vals.add(lo)
            vals.add(lo + (hi - 1 - lo) // al * al)
            for b in ub:
                s = -(-b // al) * al
                if lo <= s < hi:
                    vals.add(s)
                s = (b - e) // al * al
                if lo <= s < hi:
                    vals.add(s)
        sign = -1 if self.strategy % 2 else 1
        if not inst.bank[i]:
            return sorted(vals, key=lambda s: sign * s)
        # a bank-constrained request should touch as few units as it can: each
        # extra unit is taken from every bank neighbour (the seeds' failure mode)
        unit = inst.unit
        return sorted(vals, key=lambda s: (unit(s + e - 1) - unit(s), sign * s))

    def dfs(self):
        i = self.choose()
        if i < 0:
            return True
        for a in self.values(i):
            self.nodes += 1
            if self.nodes > self.limit:
                raise Budget
            if self.deadline is not None and not self.nodes & 63 and time.perf_counter() > self.deadline:
                raise Budget
            mark = len(self.trail)
            if self.assign(i, a) and self.dfs():
                return True
            self.undo(mark)
        return False

    def run(self):
        """Returns (addr list or None, 'placed' | 'exhausted' | 'budget').

        Restarts (`search_restarts`): chronological backtracking thrashes when an
        early choice was wrong, so the node budget is spent as a deterministic
        series of attempts with geometrically growing limits, alternating the
        value order (low / high addresses first) and perturbing ties in the
        least-slack choice. Attempt 0 is the plain search of the seeds."""
        n = self.inst.n
        self.weight = [1.0] * n
        self.strategy = 0
        try:
            queue = []
            if self.must:
                for j in range(n):
                    if self.dom[j]:
                        self._compulsory(j, queue)
                if not self._propagate(queue):
                    return None, "exhausted"
            if any(not d for d in self.dom):
                return None, "exhausted"
        except Budget:
            return None, "budget"
        root = len(self.trail)
        restarts = self.cfg.search_restarts
        limit = 128 if restarts else self.node_budget
        attempt = 0
        while True:
            self.limit = min(self.node_budget, self.nodes + limit)
            try:
                if self.dfs():
                    return list(self.addr), "placed"
                if attempt == 0 and not restarts:
                    return None, "exhausted"
            except Budget:
                if self.nodes >= self.node_budget or self.filters > self.filter_budget:
                    return None, "budget"
                if self.deadline is not None and time.perf_counter() > self.deadline:
                    return None, "budget"
            if not restarts:
                return None, "exhausted" if self.nodes < self.node_budget else "budget"
            self.undo(root)
            attempt += 1
            limit = int(limit * 1.5)
            self.strategy = attempt
            rng = random.Random(attempt)
            self.weight = [1.0 + 0.3 * rng.random() for _ in range(n)]
