"""Exact reference with OR-Tools CP-SAT, for small problems: used by the tests
(differential against the allocator) and by `bench --cpsat` to classify the
allocator's unknowns. Independent of the allocator's code (it reads the
Problem only), so agreement is evidence.

Model: start x_i = align_i * k_i; a literal r_i "in region 1" (fixed by the
region class) with x_i inside that region's bounds (so no straddling);
NoOverlap2D over (lifetime x address) rectangles, reserved ranges as
rectangles spanning all time; for each bank edge whose lifetimes overlap
(and the implicit edges of bank-separated sequences) first/last unit indices
u = floor((x - base)/E) in region 0, R0 + floor((x - r0)/2E) in region 1,
and the two unit ranges disjoint.
"""
from __future__ import annotations

import time

import numpy as np

from .problem import CODE, INFEASIBLE, INTERLEAVED, PLACED, UNKNOWN, Problem, Solution


def solve_cpsat(p: Problem, time_limit_s: float = 10.0, workers: int = 2,
                deterministic_s: float | None = None) -> Solution:
    """CP-SAT's answer within time_limit_s (wall) and, if given, deterministic_s
    of its deterministic time (with one worker the same answer on every run)."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    n = len(p)
    base, r0, top, E = int(p.memory_base), int(p.region0_end), int(p.memory_end), int(p.element_bytes)
    ext = [int(x) for x in p.extent]
    max_alloc = int(p.max_alloc) if p.max_alloc is not None else max(r0 - base, top - r0)
    R0 = -(-(r0 - base) // E)
    m = cp_model.CpModel()
    fail = lambda: Solution(INFEASIBLE, np.full(n, -1, np.int64), method="cpsat",
                            seconds=time.perf_counter() - t0)
    t_lo = int(p.start.min()) if n else 0
    t_hi = int(p.end.max()) if n else 1
    xs, rs, xi, yi = [], [], [], []
    for i in range(n):
        al, e = int(p.align[i]), ext[i]
        if e > max_alloc:
            return fail()
        k = m.NewIntVar(-(-base // al), top // al, f"k{i}")
        x = m.NewIntVar(base, top, f"x{i}")
        m.Add(x == al * k)
        r = m.NewBoolVar(f"r{i}")
        if p.region[i] == CODE:
            m.Add(r == 0)
        elif p.region[i] == INTERLEAVED:
            m.Add(r == 1)
        m.Add(x >= r0).OnlyEnforceIf(r)
        m.Add(x + e <= top).OnlyEnforceIf(r)
        m.Add(x >= base).OnlyEnforceIf(r.Not())
        m.Add(x + e <= r0).OnlyEnforceIf(r.Not())
        xs.append(x)
        rs.append(r)
        xi.append(m.NewFixedSizeIntervalVar(int(p.start[i]), int(p.end[i] - p.start[i]), f"t{i}"))
        yi.append(m.NewFixedSizeIntervalVar(x, e, f"y{i}"))
    for lo, hi in p.reserved.tolist():
        xi.append(m.NewFixedSizeIntervalVar(t_lo, t_hi - t_lo, "rt"))
        yi.append(m.NewFixedSizeIntervalVar(int(lo), int(hi - lo), "ry"))
    m.AddNoOverlap2D(xi, yi)

    live = lambda i, j: p.start[i] < p.end[j] and p.start[j] < p.end[i]
    pairs = {(min(a, b), max(a, b)) for a, b in p.bank_edges.tolist() if a != b}
    seq = {i for e in p.bank_edges.tolist() for i in e if p.count[i] > 1}
    for i in seq:
        pairs |= {(min(i, j), max(i, j)) for j in range(n) if j != i}
    pairs = sorted(q for q in pairs if live(*q))
    units = {}

    def unit_vars(i):
        if i not in units:
            nu = R0 + -(-(top - r0) // (2 * E)) + 1
            ua, ub = m.NewIntVar(0, nu, f"ua{i}"), m.NewIntVar(0, nu, f"ub{i}")
            for u, off in ((ua, 0), (ub, ext[i] - 1)):
                a = xs[i] + off
                m.Add(E * u <= a - base).OnlyEnforceIf(rs[i].Not())
                m.Add(a - base < E * (u + 1)).OnlyEnforceIf(rs[i].Not())
                m.Add(2 * E * (u - R0) <= a - r0).OnlyEnforceIf(rs[i])
                m.Add(a - r0 < 2 * E * (u - R0 + 1)).OnlyEnforceIf(rs[i])
            units[i] = (ua, ub)
        return units[i]

    for i, j in pairs:
        ai, bi = unit_vars(i)
        aj, bj = unit_vars(j)
        before = m.NewBoolVar("")
        m.Add(bi < aj).OnlyEnforceIf(before)
        m.Add(bj < ai).OnlyEnforceIf(before.Not())
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = time_limit_s
    s.parameters.num_workers = workers
    if deterministic_s is not None:
        s.parameters.max_deterministic_time = deterministic_s
    st = s.Solve(m)
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        addr = np.array([s.Value(x) for x in xs], np.int64)
        return Solution(PLACED, addr, method="cpsat", seconds=time.perf_counter() - t0)
    if st == cp_model.INFEASIBLE:
        return fail()
    return Solution(UNKNOWN, np.full(n, -1, np.int64), method="cpsat",
                    seconds=time.perf_counter() - t0)
