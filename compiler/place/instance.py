"""Preprocessing shared by the allocator's techniques (NOT by the validator).

Everything the searches touch per node is plain Python ints and lists: at tile
scale (a few hundred requests) list/bisect work beats numpy call overhead.

Domains. A request's legal start addresses are kept as a flat sorted list
[lo0, hi0, lo1, hi1, ...] of half-open intervals: every multiple of the
request's alignment in [lo, hi) is a legal start, and each lo is aligned.
The static domain already honours region class, alignment, reserved ranges,
never straddling the region boundary, and max_alloc.

Bank units. Unit boundaries `ub`: a 16 KiB element in region 0, an element pair
in region 1 (64-bit words interleave across the pair, so a buffer touching one
touches both). A request at [a, a+e) touches units U(a) .. U(a+e-1).

Effective bank edges. Only edges whose lifetimes overlap constrain anything.
A bank-separated Repeat sequence (count > 1 with an edge) owns every unit its
extent touches against every lifetime-overlapping request (the seeds: "other
live allocations cannot share those elements"), so it gets implicit edges to
all of them.
"""
from __future__ import annotations

import copy
from bisect import bisect_right

import numpy as np

from .problem import CODE, INTERLEAVED, Problem


class Instance:
    def __init__(self, p: Problem):
        self.p = p
        n = self.n = len(p)
        ext = p.extent
        self.ext = ext.tolist()
        self.align = p.align.tolist()
        self.start = p.start.tolist()
        self.end = p.end.tolist()
        self.region = p.region.tolist()
        self.t_end = max(self.end) if n else 0
        base, r0, top, E = p.memory_base, p.region0_end, p.memory_end, p.element_bytes
        self.max_alloc = p.max_alloc if p.max_alloc is not None else max(r0 - base, top - r0)
        ub = list(range(base, r0, E)) + list(range(r0, top, 2 * E)) + [top]
        self.ub = ub
        # free windows per region after reserved ranges
        res = sorted((int(a), int(b)) for a, b in p.reserved.tolist())
        self.reserved = res
        self.windows = {0: _free(base, r0, res), 1: _free(r0, top, res)}
        self.dom0 = [self._static_domain(i) for i in range(n)]
        # lifetime overlap lists (numpy once, then lists)
        s, e = p.start, p.end
        if n:
            m = (s[:, None] < e[None, :]) & (s[None, :] < e[:, None])
            np.fill_diagonal(m, False)
            rows, cols = np.nonzero(m)
            splits = np.searchsorted(rows, np.arange(1, n))
            self.ov = [c.tolist() for c in np.split(cols, splits)]
        else:
            m = np.zeros((0, 0), bool)
            self.ov = []
        self.overlap = m
        bank = [set() for _ in range(n)]
        for a, b in p.bank_edges.tolist():
            if a != b and m[a, b]:
                bank[a].add(b)
                bank[b].add(a)
        has_edge = np.zeros(n, bool)
        if len(p.bank_edges):
            has_edge[p.bank_edges.ravel()] = True
        for i in np.flatnonzero(has_edge & (p.count > 1)).tolist():
            for j in self.ov[i]:
                bank[i].add(j)
                bank[j].add(i)
        self.bank = bank

    # ---- units ---------------------------------------------------------------
    def unit(self, addr: int) -> int:
        return bisect_right(self.ub, addr) - 1

    def unit_span(self, a: int, e: int) -> tuple[int, int]:
        """Byte range [lo, hi) of the whole units [a, a+e) touches."""
        ub = self.ub
        return ub[bisect_right(ub, a) - 1], ub[bisect_right(ub, a + e - 1)]

    # ---- static domain -----------------------------------------------------------
    def windows_for(self, i: int) -> list[tuple[int, int]]:
        r = self.region[i]
        if r == CODE:
            return self.windows[0]
        if r == INTERLEAVED:
            return self.windows[1]
        return self.windows[0] + self.windows[1]

    def _static_domain(self, i: int) -> list[int]:
        e, al = self.ext[i], self.align[i]
        if e > self.max_alloc:
            return []
        d = []
        for lo, hi in self.windows_for(i):
            a = -(-lo // al) * al
            last = hi - e
            if a <= last:
                d += [a, last + 1]
        return d


def _free(lo: int, hi: int, res: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, cur = [], lo
    for a, b in res:
        if b <= cur or a >= hi:
            continue
        if a > cur:
            out.append((cur, a))
        cur = max(cur, b)
    if cur < hi:
        out.append((cur, hi))
    return out


class SubInstance(Instance):
    """The requests `idx` of a parent instance, renumbered 0..k-1 (keeps the
    parent's effective bank edges, memory map and completion time)."""

    def __init__(self, parent: Instance, idx: list[int]):
        self.parent, self.idx = parent, list(idx)
        pos = {j: t for t, j in enumerate(self.idx)}
        self.p = None
        self.n = len(self.idx)
        for f in ("ext", "align", "start", "end", "region", "dom0"):
            src = getattr(parent, f)
            setattr(self, f, [src[j] for j in self.idx])
        self.ov = [[pos[k] for k in parent.ov[j] if k in pos] for j in self.idx]
        self.bank = [{pos[k] for k in parent.bank[j] if k in pos} for j in self.idx]
        for f in ("t_end", "max_alloc", "ub", "reserved", "windows"):
            setattr(self, f, getattr(parent, f))


def time_mirror(sub: Instance) -> Instance:
    """The same requests with time reversed (`time_mirror`): [s, e) becomes
    [t0 + t1 - e, t0 + t1 - s). Which pairs are live together is unchanged, so a
    placement of the mirror is one of `sub` address for address (request i is
    request i); only a search sees it differently (the skyline fills the
    leftmost lowest section first)."""
    m = copy.copy(sub)
    t = min(sub.start) + max(sub.end) if sub.n else 0
    m.start = [t - e for e in sub.end]
    m.end = [t - s for s in sub.start]
    m.mirrored = True
    return m


def parts(inst: Instance) -> list[list[int]]:
    """Time sections no request crosses: requests sorted by start, cut where the
    next start is at or after every earlier end. Parts share no live pair, so
    each can be placed independently (MiniMalloc's partitioning)."""
    order = sorted(range(inst.n), key=lambda i: (inst.start[i], i))
    out, cur, reach = [], [], None
    for i in order:
        if cur and inst.start[i] >= reach:
            out.append(cur)
            cur, reach = [], None
        cur.append(i)
        reach = inst.end[i] if reach is None else max(reach, inst.end[i])
    if cur:
        out.append(cur)
    return out
