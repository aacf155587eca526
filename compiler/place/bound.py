"""Proofs of overcapacity. `prove` returns a Proof only when no placement can
exist, so INFEASIBLE is never reported on a hunch:

  * a request with an empty static domain (larger than max_alloc or than every
    free window of its region class, after reserved ranges);
  * live bytes at some event (requests live then pairwise overlap in time, so
    they need disjoint bytes) exceed the bytes available: overall; in region 1
    for the requests only region 1 can hold; in region 0 for those only region 0
    can hold (`confined`).

A request may never straddle region0_end, so a standard request with no legal
start in region 0's free windows (its extent, aligned, fits none of them after
the code and exchange tables reserved there) must sit in region 1 as surely as
an interleaved one. Without that, a tile whose region-1-only buffers outgrow
region 1 while all its bytes fit the tile was proved infeasible only by
exhausting the search, reported with deficit 0 (#26; expand's screen,
expand/analysis.py region1_peak, counts the same buffers).

`unit_proofs`: a bank-separated sequence (count > 1 with a bank edge) owns every unit
(16 KiB element in region 0, element pair in region 1) its extent touches against every
request live beside it, so it denies them at least ceil(extent / unit) whole units: its
extent plus a *waste* of ceil(extent / unit) * unit - extent, less the reserved bytes of
its region (a reservation may share its units; nothing else may). The three live-byte
proofs are repeated with that waste added (kinds `live-units`, `live-region1-units`,
`live-region0-units`). Without it every tile of the tiny 8-layer batch-4 trial with
policy.ring_units (a 90,112 B pooled `weights.ring` sequence = 2.75 of region 1's 4 pairs)
passed the bound, failed the greedy orders and went to CP-SAT, 63 tiles x ~7 s (#26).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .instance import Instance
from .problem import CODE, INTERLEAVED, STANDARD


@dataclass
class Proof:
    kind: str
    event: int
    live_bytes: int
    available_bytes: int
    request: int = -1

    @property
    def deficit(self) -> int:
        return self.live_bytes - self.available_bytes


def live_profile(p, mask=None, extra=None):
    """(events, live bytes at each event) for the requests in mask (each request's
    extent plus `extra` bytes, if given)."""
    s, e, x = p.start, p.end, (p.extent if extra is None else p.extent + extra)
    if mask is not None:
        s, e, x = s[mask], e[mask], x[mask]
    ev = np.unique(s)
    if not len(ev):
        return ev, np.zeros(0, np.int64)
    os_, oe = np.argsort(s, kind="stable"), np.argsort(e, kind="stable")
    cs = np.concatenate([[0], np.cumsum(x[os_])])
    ce = np.concatenate([[0], np.cumsum(x[oe])])
    started = cs[np.searchsorted(s[os_], ev, side="right")]
    ended = ce[np.searchsorted(e[oe], ev, side="right")]
    return ev, started - ended


def available(inst: Instance) -> tuple[int, int]:
    """Free bytes (after reserved ranges) in region 0 and region 1."""
    return tuple(sum(b - a for a, b in inst.windows[r]) for r in (0, 1))


def peak(inst: Instance):
    """(event, live bytes, available bytes) at the worst overall event."""
    a0, a1 = available(inst)
    ev, live = live_profile(inst.p)
    if not len(ev):
        return -1, 0, a0 + a1
    k = int(np.argmax(live))
    return int(ev[k]), int(live[k]), a0 + a1


def confined(inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """(only region 0 can hold it, only region 1 can hold it) per request, from the
    static domains (alignment, reserved ranges, max_alloc): a standard request's
    starts in a region-0 window are below region0_end, in a region-1 window at or
    above it. A request with an empty domain is in neither (`prove` rejects it first)."""
    p, r0 = inst.p, inst.p.region0_end
    low = np.array([bool(d) and d[0] < r0 for d in inst.dom0], bool)       # a start below r0
    high = np.array([bool(d) and d[-1] > r0 for d in inst.dom0], bool)     # a start at/above r0
    std = p.region == STANDARD
    return ((p.region == CODE) | (std & low & ~high),
            (p.region == INTERLEAVED) | (std & high & ~low))


def unit_waste(inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """(waste in region 0, waste in region 1) per request: bytes beyond its extent that a
    bank-separated sequence placed there denies to every request live beside it (0 for
    other requests, and for a region its static domain never reaches: then the other's)."""
    p = inst.p
    n = inst.n
    owns = np.zeros(n, bool)
    if len(p.bank_edges):
        owns[p.bank_edges.ravel()] = True
    owns &= p.count > 1
    w = [np.zeros(n, np.int64), np.zeros(n, np.int64)]
    if not owns.any():
        return w[0], w[1]
    r0 = p.region0_end
    a = available(inst)
    sizes = (r0 - p.memory_base, p.memory_end - r0)
    for i in np.flatnonzero(owns).tolist():
        d, x = inst.dom0[i], inst.ext[i]
        can = (bool(d) and d[0] < r0, bool(d) and d[-1] > r0)
        for r, unit in ((0, p.element_bytes), (1, 2 * p.element_bytes)):
            waste = max(0, -(-x // unit) * unit - x - (sizes[r] - a[r]))
            w[r][i] = waste
        if not can[0]:
            w[0][i] = w[1][i]
        if not can[1]:
            w[1][i] = w[0][i]
    return w[0], w[1]


def prove(inst: Instance) -> Proof | None:
    p = inst.p
    a0, a1 = available(inst)
    for i in range(inst.n):
        if not inst.dom0[i]:
            wins = inst.windows_for(i)
            big = max((b - a for a, b in wins), default=0)
            cap = min(big, inst.max_alloc)
            return Proof("request", inst.start[i], inst.ext[i], cap, i)
    best = None
    only0, only1 = confined(inst)
    w0, w1 = unit_waste(inst)
    plain = [("live", None, a0 + a1, None), ("live-region1", only1, a1, None),
             ("live-region0", only0, a0, None)]
    # unit_proofs, only when the plain ones prove nothing (they keep their kinds) and some
    # bank-separated sequence wastes bytes
    units = [("live-units", None, a0 + a1, np.minimum(w0, w1)),
             ("live-region1-units", only1, a1, w1), ("live-region0-units", only0, a0, w0)]
    for checks in (plain, units if (w0.any() or w1.any()) else []):
        for kind, mask, avail, extra in checks:
            if mask is not None and not mask.any():
                continue
            ev, live = live_profile(p, mask, extra)
            over = live - avail
            k = int(np.argmax(over))
            if over[k] > 0 and (best is None or over[k] > best.deficit):
                best = Proof(kind, int(ev[k]), int(live[k]), avail)
        if best is not None:
            return best
    return best
