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


def live_profile(p, mask=None):
    """(events, live bytes at each event) for the requests in mask."""
    s, e, x = p.start, p.end, p.extent
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
    for kind, mask, avail in (("live", None, a0 + a1),
                              ("live-region1", only1, a1),
                              ("live-region0", only0, a0)):
        if mask is not None and not mask.any():
            continue
        ev, live = live_profile(p, mask)
        over = live - avail
        k = int(np.argmax(over))
        if over[k] > 0 and (best is None or over[k] > best.deficit):
            best = Proof(kind, int(ev[k]), int(live[k]), avail)
    return best
