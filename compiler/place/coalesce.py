"""Handover coalescing (`coalesce_handovers`): a first guess for pure parts.

When the only request of extent x ending at event t and the only request of
extent x starting at t are joined into one request (a band), and chains of
such handovers into one, the problem shrinks (near-zero slack: extents within
0.5 % or 2 % of each other, the band taking the larger: a second and third
tier, each a tighter restriction); any placement of the joined
problem, expanded, is a placement of the original (each member sits at its
band's offset, and the members of a band are disjoint in time). It is a
restriction, not an equivalence: a failure or an exhausted search of the
joined problem proves nothing, so the search keeps attempting the original.

Why it pays: zero-slack problems made by cutting the lifetime x address
rectangle (guillotine cuts, a network's long-lived bands) hand a band's bytes
from one buffer to the next at the same offset; the search on the original
must rediscover every such alignment, on the joined problem it is given.
Measured: guillotine-350-z 350 -> 265 requests, unknown in 60 s -> 0.25 s;
guillotine-400-nz at 0.5 %: 400 -> 320 requests, placed in 0.6 s.
"""
from __future__ import annotations

import numpy as np


TOLERANCES = (0.0, 0.005, 0.02)   # tiers tried: exact, then near-same extents


def handovers(ext, start, end, tol: float = 0.0, nearest: bool = False
              ) -> tuple[np.ndarray, int]:
    """(group id per request, group count): unambiguous handovers chained. At
    each event, an ender and a starter whose extents differ by at most `tol`
    of the larger are joined when each is the other's only such partner (with
    `nearest`: each is the other's unique nearest in extent, within `tol`)."""
    ends, starts = {}, {}
    for i, (a, b) in enumerate(zip(start, end)):
        ends.setdefault(b, []).append(i)
        starts.setdefault(a, []).append(i)
    close = lambda i, j: abs(ext[i] - ext[j]) <= tol * max(ext[i], ext[j])
    nxt = {}
    for t, es in ends.items():
        ss = starts.get(t, ())
        for e in es:
            if nearest:
                m = _nearest(ext, e, ss)
                if m is not None and close(e, m) and _nearest(ext, m, es) == e:
                    nxt[e] = m
                continue
            m = [s for s in ss if close(e, s)]
            if len(m) == 1 and sum(close(x, m[0]) for x in es) == 1:
                nxt[e] = m[0]
    has_prev = set(nxt.values())
    gid = np.full(len(ext), -1, np.int64)
    g = 0
    for i in range(len(ext)):
        if i in has_prev:
            continue
        j = i
        while j is not None:
            gid[j] = g
            j = nxt.get(j)
        g += 1
    return gid, g


def _nearest(ext, i, js):
    """The j in js closest to i in extent, None when two tie."""
    d = sorted((abs(ext[j] - ext[i]), j) for j in js)
    if not d or (len(d) > 1 and d[1][0] == d[0][0]):
        return None
    return d[0][1]


def _bands(ext, start, end, align, tol, stack):
    """Bands as (members [(request, offset in band)], extent, start, end,
    alignment). Without `stack`: one pass of handover joining. With it, to a
    fixpoint, alternately (a) stack every group of bands with the same lifetime
    into one (largest first, each member at the sum of the extents below it;
    only when every extent is a multiple of the group's largest alignment, so
    each member stays aligned) and (b) join handovers: a guillotine cut's tree
    folds back up (horizontal cuts stack, vertical cuts hand over)."""
    bands = [([(i, 0)], int(ext[i]), int(start[i]), int(end[i]), int(align[i]))
             for i in range(len(ext))]
    while True:
        n0 = len(bands)
        if stack:
            by = {}
            for b in bands:
                by.setdefault((b[2], b[3]), []).append(b)
            bands = []
            for (s0, e0), bs in by.items():
                al = max(b[4] for b in bs)
                if len(bs) == 1 or any(b[1] % al for b in bs):
                    bands += bs
                    continue
                off, mem = 0, []
                for b in sorted(bs, key=lambda b: -b[1]):
                    mem += [(i, r + off) for i, r in b[0]]
                    off += b[1]
                bands.append((mem, off, s0, e0, al))
        gid, g = handovers([b[1] for b in bands], [b[2] for b in bands],
                           [b[3] for b in bands], tol, nearest=stack)
        if g < len(bands):
            groups = [[] for _ in range(g)]
            for b, k in zip(bands, gid):
                groups[k].append(b)
            bands = [([m for b in bs for m in b[0]], max(b[1] for b in bs),
                      min(b[2] for b in bs), max(b[3] for b in bs), max(b[4] for b in bs))
                     for bs in groups]
        if not stack or len(bands) == n0:
            return bands


class Coalesced:
    """A pure part's requests joined by handovers (and, with `stack`, same-
    lifetime stacks), with the attributes the compiled search reads (n, windows,
    ext, align, start, end, ov). A band takes its members' largest extent and
    alignment; each member sits at the band's offset plus its own (`rel`)."""

    def __init__(self, sub, tol: float = 0.0, stack: bool = False):
        bands = _bands(sub.ext, sub.start, sub.end, sub.align, tol, stack)
        self.n = len(bands)
        self.gid = np.zeros(len(sub.ext), np.int64)
        self.rel = np.zeros(len(sub.ext), np.int64)
        for k, b in enumerate(bands):
            for i, r in b[0]:
                self.gid[i], self.rel[i] = k, r
        self.ext = [b[1] for b in bands]
        self.start = [b[2] for b in bands]
        self.end = [b[3] for b in bands]
        self.align = [b[4] for b in bands]
        self.windows = sub.windows
        start, end = np.array(self.start, np.int64), np.array(self.end, np.int64)
        live = (start[:, None] < end[None, :]) & (start[None, :] < end[:, None])
        np.fill_diagonal(live, False)
        self.ov = [np.flatnonzero(row).tolist() for row in live]

    def key(self) -> bytes:
        """Two joinings are the same problem when members and offsets agree."""
        return self.gid.tobytes() + self.rel.tobytes()

    def expand(self, addr) -> list:
        """The joined placement as one address per original request."""
        return (np.asarray(addr, np.int64)[self.gid] + self.rel).tolist()
