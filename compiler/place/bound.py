"""Proofs of overcapacity. `prove` returns a Proof only when no placement can
exist, so INFEASIBLE is never reported on a hunch:

  * a request with an empty static domain (larger than max_alloc or than every
    free window of its region class, after reserved ranges);
  * live bytes at some event (requests live then pairwise overlap in time, so
    they need disjoint bytes) exceed the bytes available: overall, in region 1
    for interleaved requests, in region 0 for code.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .instance import Instance
from .problem import CODE, INTERLEAVED


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
    for kind, mask, avail in (("live", None, a0 + a1),
                              ("live-interleaved", p.region == INTERLEAVED, a1),
                              ("live-code", p.region == CODE, a0)):
        if mask is not None and not mask.any():
            continue
        ev, live = live_profile(p, mask)
        over = live - avail
        k = int(np.argmax(over))
        if over[k] > 0 and (best is None or over[k] > best.deficit):
            best = Proof(kind, int(ev[k]), int(live[k]), avail)
    return best
