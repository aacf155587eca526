"""Large-neighbourhood repair of a partial placement (`lns_repair`), for pure parts
(one free window, no bank edges) the compiled round robin leaves unplaced.

Why (issue #29, sixth round; experiments/placement_corpus/README.md): a search
that fixes requests in one order (the skyline: bottom up, left to right) cannot
take back an early choice without undoing everything after it; a repair can: it
keeps a partial placement, frees a window of it, and re-solves the window
exactly with everything else fixed, anywhere in time or address. Measured there:
on the tuning set's stuck cases no partial is near complete (the skyline's path
at its limits 3-30 % of the area, this greedy start 88-95 %, at ~0.5 % slack)
and 40 windows gain 0.01-0.8 % of the area, so the flag is off by default.

* Start (best_start): greedy first fit, skipping what does not fit (not stopping
  at the first failure as greedy.py's orders do), in three orders, on the part
  and on each fold the caller has (expanded); the most area (bytes x lifetime) wins.
* Step: the unplaced request of largest area is the target; the window is every
  request whose lifetime meets the target's lifetime widened by `widen` of its
  length on each side (placed or not); the placed requests outside the window
  that meet it in time are fixed obstacles (over `repair_window_max` requests:
  those nearest the target in time). CP-SAT solves the window with
  NoOverlap2D over optional rectangles (a request may stay out), maximising the
  placed area, hinted with the current placement and never accepting less
  area: so the partial only improves. On no gain the window widens
  (REPAIR_WIDEN); after the last width the target moves to the next unplaced
  request (rotation), so a request that cannot be helped does not block others;
  a whole rotation without a gain is a fixpoint: the repair gives up.
* Determinism: CP-SAT runs one worker with a fixed seed and a deterministic-time
  limit per step (never wall time), so the bytes depend only on the input and
  config; the work is counted from CP-SAT's deterministic time and the windows
  (REPAIR_WORK, WINDOW_WORK), like portfolio.py's nodes x size.
* Acceptance: a complete placement is returned only after the independent
  validator (validate.py) passes it on the part's own Problem.
"""
from __future__ import annotations

import time

import numpy as np

from .greedy import first_fit
from .problem import Problem
from .validate import validate

REPAIR_WIDEN = (0.0, 0.5, 1.5)   # window: the target's lifetime widened by this x its length
REPAIR_WORK = 150_000_000        # work per unit of CP-SAT deterministic time, plus
WINDOW_WORK = 40_000_000         # per window: its model and presolve, which the deterministic
                                 # time leaves out (0.1 unit windows took 1.6-3.4 s wall at load
                                 # ~3.8; the kernels do ~20 M nodes x size per second there): work
                                 # should track time (portfolio.py races by work)


def _overlaps(sub):
    s, e = np.asarray(sub.start, np.int64), np.asarray(sub.end, np.int64)
    return (s[:, None] < e[None, :]) & (s[None, :] < e[:, None])


def greedy_partial(sub, orders) -> np.ndarray:
    """First fit of each order, skipping requests that do not fit; the
    placement (-1: unplaced) with the most area placed (first order on ties)."""
    (lo, hi), = [w for r in (0, 1) for w in sub.windows[r]]
    n = sub.n
    ext, al = sub.ext, sub.align
    area = _area(sub)
    best, best_area = None, -1
    for order in orders:
        addr = [-1] * n
        for i in order:
            blocks = sorted((addr[j], addr[j] + ext[j]) for j in sub.ov[i] if addr[j] >= 0)
            addr[i] = first_fit([lo, hi - ext[i] + 1] if hi - ext[i] >= lo else [], al[i],
                                ext[i], blocks)
        a = np.asarray(addr, np.int64)
        got = int(area[a >= 0].sum())
        if got > best_area:
            best, best_area = a, got
    return best


def _area(sub) -> np.ndarray:
    return np.asarray(sub.ext, np.int64) * (np.asarray(sub.end, np.int64)
                                            - np.asarray(sub.start, np.int64))


def start_orders(sub):
    """Deterministic first-fit orders: start time (online), area, extent (big first)."""
    n, s, x, ar = sub.n, sub.start, sub.ext, _area(sub).tolist()
    return [sorted(range(n), key=lambda i: (s[i], -x[i], i)),
            sorted(range(n), key=lambda i: (-ar[i], i)),
            sorted(range(n), key=lambda i: (-x[i], s[i], i))]


def solve_window(sub, addr, free, ov, step_det_s, seed=0, deadline=None):
    """CP-SAT on the requests `free` (indices) with every other placed request
    live beside them fixed. Returns (new addr for `free`, -1 out, or None when
    nothing better was found; deterministic time spent)."""
    from ortools.sat.python import cp_model
    (lo, hi), = [w for r in (0, 1) for w in sub.windows[r]]
    free = list(free)
    fs = set(free)
    m = cp_model.CpModel()
    xi, yi, pres, xs = [], [], [], []
    w = np.maximum(1, _area(sub) >> 8)          # area, scaled: objective terms stay small
    for i in free:
        e, g = sub.ext[i], sub.align[i]
        k = m.NewIntVar(-(-lo // g), (hi - e) // g, f"k{i}")
        p = m.NewBoolVar(f"p{i}")
        xi.append(m.NewOptionalFixedSizeIntervalVar(sub.start[i], sub.end[i] - sub.start[i], p,
                                                    f"t{i}"))
        yi.append(m.NewOptionalFixedSizeIntervalVar(k * g if g > 1 else k, e, p, f"y{i}"))
        pres.append(p)
        xs.append(k)
        if addr[i] >= 0:
            m.AddHint(k, addr[i] // g)
            m.AddHint(p, 1)
        else:
            m.AddHint(p, 0)
    fixed = sorted({j for i in free for j in np.flatnonzero(ov[i]).tolist()
                    if j not in fs and addr[j] >= 0})
    for j in fixed:
        xi.append(m.NewFixedSizeIntervalVar(sub.start[j], sub.end[j] - sub.start[j], ""))
        yi.append(m.NewFixedSizeIntervalVar(int(addr[j]), sub.ext[j], ""))
    m.AddNoOverlap2D(xi, yi)
    now = int(sum(int(w[i]) for i in free if addr[i] >= 0))
    obj = sum(int(w[i]) * p for i, p in zip(free, pres))
    m.Add(obj >= now + 1)                       # only a gain is worth taking
    m.Maximize(obj)
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.random_seed = seed
    s.parameters.max_deterministic_time = step_det_s
    # the deterministic limit decides what a window returns; the wall clock only stops
    # the search at the caller's deadline, and a window it cut is discarded (its answer
    # could depend on the timing)
    s.parameters.max_time_in_seconds = 1e9 if deadline is None else \
        max(0.01, deadline - time.perf_counter())
    st = s.Solve(m)
    det = s.ResponseProto().deterministic_time
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE) or (
            deadline is not None and time.perf_counter() >= deadline):
        return None, det
    out = np.array([s.Value(k) * sub.align[i] if s.Value(p) else -1
                    for i, k, p in zip(free, xs, pres)], np.int64)
    return out, det


def best_start(sub, folds=()):
    """The greedy partial (greedy_partial) of the part and of each fold, a fold's
    expanded onto the part's requests (a band's members at its offset plus
    their own, where the band was placed); the most area placed wins (the
    part first, then the folds in order, on ties)."""
    area = _area(sub)
    best = greedy_partial(sub, start_orders(sub))
    for co in folds:
        b = greedy_partial(co, start_orders(co))
        a = np.asarray(b, np.int64)[co.gid] + co.rel
        a[np.asarray(b, np.int64)[co.gid] < 0] = -1
        if area[a >= 0].sum() > area[best >= 0].sum():
            best = a
    return best


def repair(sub, cfg, start=None, work_budget=None, log=None, deadline=None):
    """(complete addr | None, work). `start`: a partial placement (-1 unplaced) to
    repair; None: greedy_partial. Steps until every request is placed or the
    work budget (cfg.repair_work; REPAIR_WORK per deterministic unit, WINDOW_WORK
    per window) is spent."""
    budget = cfg.repair_work if work_budget is None else work_budget
    addr = greedy_partial(sub, start_orders(sub)) if start is None else np.array(start, np.int64)
    ov = _overlaps(sub)
    np.fill_diagonal(ov, False)
    area = _area(sub)
    s, e = np.asarray(sub.start, np.int64), np.asarray(sub.end, np.int64)
    work, skip, wi = 0, 0, 0
    while True:
        out = np.flatnonzero(addr < 0)
        if len(out) == 0:
            break
        if work >= budget or (deadline is not None and time.perf_counter() >= deadline):
            return None, work
        tgt = out[np.lexsort((out, -area[out]))][skip % len(out)]
        span = e[tgt] - s[tgt]
        g = int(REPAIR_WIDEN[wi] * span)
        a, b = s[tgt] - g, e[tgt] + g
        free = np.flatnonzero((s < b) & (a < e))
        if len(free) > cfg.repair_window_max:        # the target's nearest in time first
            d = np.maximum(s[free] - s[tgt], 0) + np.maximum(e[tgt] - e[free], 0)
            keep = free[np.lexsort((free, d))][:cfg.repair_window_max]
            free = np.union1d(keep, [tgt])
        new, det = solve_window(sub, addr, free, ov, cfg.repair_step_det_s, deadline=deadline)
        work += int(det * REPAIR_WORK) + WINDOW_WORK
        if log is not None:
            log.append((int(tgt), wi, len(free), new is not None, int(area[addr >= 0].sum()),
                        len(out), det))
        if new is not None:
            addr[free] = new
            wi, skip = 0, 0
            continue
        wi += 1
        if wi == len(REPAIR_WIDEN):
            wi, skip = 0, skip + 1
            if skip >= len(out):                   # every target at every width, no gain:
                return None, work                  # a fixpoint, nothing left to try
    if validate(part_problem(sub), addr.tolist()):
        raise RuntimeError("lns_repair: a complete placement the validator rejects (a bug)")
    return addr.tolist(), work


def part_problem(sub) -> Problem:
    """The part as a Problem for the independent validator (pure: no bank edges)."""
    if not hasattr(sub, "idx"):
        return sub.p
    p, idx = sub.parent.p, np.asarray(sub.idx, np.int64)
    return Problem(memory_base=p.memory_base, region0_end=p.region0_end,
                   memory_end=p.memory_end, element_bytes=p.element_bytes,
                   size=p.size[idx], align=p.align[idx], start=p.start[idx], end=p.end[idx],
                   region=p.region[idx], count=p.count[idx], stride=p.stride[idx],
                   reserved=p.reserved, max_alloc=p.max_alloc)
