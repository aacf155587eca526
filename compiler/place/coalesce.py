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

Partner folding (`coalesce_partners`, _partner_bands): the same tree folded
with stacks formed only together with their handover partner, subsets matched
per event and checked against capacity and orphans; see its docstring.

Learned no-goods (`partner_nogoods`, Coalesced.refold): near zero slack a
rival pairing within the tolerance can win at an event (nothing local tells
them apart), and the true partners are then left unmatched there: the fold
stops with bands still ending and starting at that event (stuck). A refold
forbids every join made at a stuck event (and keeps what earlier folds
learned), so the rivals' other pairings, or none, are tried; the search
branches on folds this way, a chain of restrictions in the round robin.
"""
from __future__ import annotations

from bisect import bisect_left
from itertools import combinations

import numpy as np


TOLERANCES = (0.0, 0.005, 0.02)   # tiers tried: exact, then near-same extents
# partner folding (`coalesce_partners`): relative tolerances raised in steps, each
# to a fixpoint (exact joins first, so near-equal ones see the bands they form);
# two schedules, each one joined variant (guillotine-600-nz places with the
# second, heavy-1000-nz with the first; probes, 3 s each), and with
# `partner_quiet_events` each once more joining only at quiet events
PARTNER_SCHEDULES = ((0.0, 0.01), (0.0, 0.002, 0.01))
# `portfolio` (search.py): the first worker's own partner folds, other tolerance
# steps beside the part and its handover folds (the chains of the two defaults
# converge on the same coincidental joins; another step order makes other ones),
# with their quiet twins and chains
PORTFOLIO_SCHEDULES = ((0.0, 0.005, 0.01), (0.0, 0.001, 0.003, 0.01))
SUBSET_ALL = 8        # a lifetime group this small: every subset is a candidate side
PAIRS_MAX = 32        # ...up to this size also pairs (then singles and the whole group)
CANDS_MAX = 20_000    # candidates per event at most (many equal extents: the first found)
PACK_EXACT = 14       # a conflict component this small: the best packing by enumeration
ORPHAN_LIM = 10       # an event with at most this many bands a side: joins checked for orphans


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


def _stack_band(bands, ks, off0=0):
    """Members of bands ks stacked largest first from off0: (members, total extent)."""
    mem, off = [], off0
    for k in sorted(ks, key=lambda k: (-bands[k][1], k)):
        mem += [(i, r + off) for i, r in bands[k][0]]
        off += bands[k][1]
    return mem, off - off0


def _sides(group, ext):
    """Candidate sides of a handover from one lifetime group: (extent sum, members).
    Every subset of a small group; of a larger one, singles, pairs (up to
    PAIRS_MAX members) and the whole."""
    sizes = (range(1, len(group) + 1) if len(group) <= SUBSET_ALL else
             (1, 2) if len(group) <= PAIRS_MAX else (1,))
    e = [ext[k] for k in group]
    out = [(sum(ce), c) for r in sizes
           for ce, c in zip(combinations(e, r), combinations(group, r))]
    if len(group) > SUBSET_ALL:
        out.append((sum(ext[k] for k in group), tuple(group)))
    return out


def _pack(cands):
    """Disjoint joins from candidates (cost, t, A, B): per connected component
    (candidates sharing a band), the packing joining the most bands, then the
    least total cost (a small assignment problem: the nearest pair first would
    take a partner another band needs, guillotine-600-nz at event 626); a large
    component greedily by cost."""
    owner, parent = {}, list(range(len(cands)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for i, c in enumerate(cands):
        for k in c[2] + c[3]:
            if k in owner:
                parent[find(i)] = find(owner[k])
            else:
                owner[k] = i
    comps = {}
    for i in range(len(cands)):
        comps.setdefault(find(i), []).append(cands[i])
    out = []
    for cs in comps.values():
        if len(cs) > PACK_EXACT:
            used = set()
            for c in cs:
                if not used & set(c[2] + c[3]):
                    used |= set(c[2] + c[3])
                    out.append(c)
            continue
        best = [(-1, 0.0), []]

        def rec(i, used, cov, cost, chosen):
            if i == len(cs):
                if cov > best[0][0] or (cov == best[0][0] and cost < best[0][1]):
                    best[0], best[1] = (cov, cost), list(chosen)
                return
            m = set(cs[i][2] + cs[i][3])
            if not used & m:
                chosen.append(cs[i])
                rec(i + 1, used | m, cov + len(m), cost + cs[i][0], chosen)
                chosen.pop()
            rec(i + 1, used, cov, cost, chosen)
        rec(0, frozenset(), 0, 0.0, [])
        out += best[1]
    return out


def _subset_sums(side, ext) -> np.ndarray:
    """Extent sums of every subset of `side` (<= ORPHAN_LIM bands), indexed by
    bitmask (bit b: side[b]); entry 0 is the empty subset."""
    sums = np.zeros(1 << len(side), np.int64)
    for b, k in enumerate(side):
        sums[1 << b:2 << b] = sums[:1 << b] + int(ext[k])
    return sums


def _orphans(enders, starters, ext, tol) -> set:
    """Bands at an event (enders or starters) that no longer have a partner:
    no subset of their side containing them matches a subset of the other
    side within `tol`. In a guillotine tiling every band ending at an inner
    event t is part of a left half whose right half starts at t, so a join
    that orphans a band is premature (heavy-400-nz at t=475: 202012 -> 202032
    within 0.01 %, leaving the 381-byte member of the true partner alone).
    Events with more than ORPHAN_LIM bands a side are not checked (nothing).
    Subset sums by bitmask, matched with one sorted search (a refold runs this
    ~15,000 times: it was 40 % of the fold as Python combinations)."""
    if len(enders) > ORPHAN_LIM or len(starters) > ORPHAN_LIM:
        return set()
    if not enders or not starters:
        return set(enders) | set(starters)
    out = set()
    for side, other in ((enders, starters), (starters, enders)):
        ok = _near_any(np.sort(_subset_sums(other, ext)[1:]), _subset_sums(side, ext), tol)
        masks = np.arange(1 << len(side))
        for b, u in enumerate(side):
            if not ok[(masks >> b) & 1 == 1].any():
                out.add(u)
    return out


def _near_any(sums: np.ndarray, v: np.ndarray, tol) -> np.ndarray:
    """Per value of v: is some value of the sorted `sums` within tol (relative
    to the larger) of it, and within the window [v - int(tol v) - 1,
    v + int(tol v) + 1]? Below v the test |s - v| <= tol v is monotone in s, so
    the largest s <= v decides; above v, s - v <= tol s and the window both
    favour the smallest s >= v."""
    w = (tol * v).astype(np.int64) + 1
    lo = np.searchsorted(sums, v, "right") - 1
    s = sums[np.maximum(lo, 0)]
    below = (lo >= 0) & (v - s <= tol * v) & (s >= v - w)
    hi = np.searchsorted(sums, v, "left")
    s = sums[np.minimum(hi, len(sums) - 1)]
    above = (hi < len(sums)) & (s - v <= tol * s) & (s <= v + w)
    return below | above


def _jkey(bands, A, B):
    """A join's identity: the requests on each side (frozensets)."""
    return (frozenset(i for k in A for i, _ in bands[k][0]),
            frozenset(i for k in B for i, _ in bands[k][0]))


def _partner_bands(ext, start, end, align, cap, schedule, quiet=False, forbid=frozenset(),
                   log=None):
    """Bands by partner folding. A guillotine tree folds up bottom-up, but a
    same-lifetime group is often not one tree node (heavy cuts share lifetimes
    by chance: stacking the whole group made heavy-900-z's fold infeasible). So
    a stack forms only with its handover partner: at event t, a subset A of one
    group of bands ending at t (same start) and a subset B of one group starting
    at t (same end) whose extent sums agree within the tolerance join into one
    band (A stacked, B stacked, both from the band's offset; extent the larger
    sum). Candidates are packed per conflict component (_pack). A join that
    grows a side's extent is kept only if the live bytes of the folded problem
    stay within `cap` at every event of that side (checked, not hoped), and
    only if it orphans no band at its event (_orphans). Bands spanning the
    whole part stack at once (nothing hands over to them). With `quiet`, no
    join at a busy event (more than ORPHAN_LIM bands a side), where the orphan
    check is off and sums of unrelated subsets coincide within 1 %
    (heavy-800-nz at t=760: 40412 against 40414 bytes, scattered bands).
    heavy-900-z: 900 requests -> 1 band (the stacking fold: 100, infeasible).
    `forbid`: joins (_jkey) never made (partner_nogoods); `log`, when given,
    receives (join, event) for every join made."""
    bands = [([(i, 0)], int(ext[i]), int(start[i]), int(end[i]), int(align[i]))
             for i in range(len(ext))]
    ev = np.unique(np.concatenate([np.asarray(start), np.asarray(end)]))
    t0, t1 = int(ev[0]), int(ev[-1])
    for tol in schedule:
        while True:
            n0 = len(bands)
            x = [b[1] for b in bands]
            s = np.searchsorted(ev, [b[2] for b in bands])
            e = np.searchsorted(ev, [b[3] for b in bands])
            load = np.zeros(len(ev) + 1, np.int64)
            np.add.at(load, s, x)
            np.add.at(load, e, [-v for v in x])
            load = np.cumsum(load)
            ends, starts = {}, {}
            for k, b in enumerate(bands):
                ends.setdefault(b[3], {}).setdefault(b[2], []).append(k)
                starts.setdefault(b[2], {}).setdefault(b[3], []).append(k)
            cands = []
            for t in sorted(set(ends) & set(starts)):
                if quiet and max(sum(map(len, ends[t].values())),
                                 sum(map(len, starts[t].values()))) > ORPHAN_LIM:
                    continue
                n_t = len(cands)
                shs = []          # each starting group's sides, once per event (not per G)
                for H in starts[t].values():
                    sh = sorted(_sides(H, x))
                    shs.append((sh, [v for v, _ in sh]))
                for G in ends[t].values():
                    sg = _sides(G, x)
                    for sh, keys in shs:
                        for va, A in sg:
                            j = bisect_left(keys, va - int(tol * va) - 1)
                            while j < len(sh) and keys[j] <= va + int(tol * va) + 1 \
                                    and len(cands) - n_t < CANDS_MAX:
                                vb, B = sh[j]
                                m = max(va, vb)
                                al = max(bands[k][4] for k in A + B)
                                if abs(va - vb) <= tol * m and (
                                        len(A) + len(B) == 2 or not any(x[k] % al for k in A + B)) \
                                        and (not forbid or _jkey(bands, A, B) not in forbid):
                                    cands.append((abs(va - vb) / m, t, A, B))
                                j += 1
            cands.sort()
            joins = []
            left = {}             # per event: bands ending / starting there, not yet joined
            for _, t, A, B in _pack(cands):
                if t not in left:
                    le = [k for g in ends[t].values() for k in g]
                    ls = [k for g in starts[t].values() for k in g]
                    left[t] = (le, ls, _orphans(le, ls, x, schedule[-1]))
                le, ls, orph = left[t]
                le2 = [k for k in le if k not in A]
                ls2 = [k for k in ls if k not in B]
                if _orphans(le2, ls2, x, schedule[-1]) - orph:
                    continue
                va, vb = sum(x[k] for k in A), sum(x[k] for k in B)
                m = max(va, vb)
                ka, kb = A[0], B[0]
                if (m > va and load[s[ka]:e[ka]].max() + m - va > cap) or \
                        (m > vb and load[s[kb]:e[kb]].max() + m - vb > cap):
                    continue
                load[s[ka]:e[ka]] += m - va
                load[s[kb]:e[kb]] += m - vb
                left[t] = (le2, ls2, orph)
                joins.append((A, B))
                if log is not None:
                    log.append((_jkey(bands, A, B), t))
            used = {k for A, B in joins for k in A + B}
            nb = [b for k, b in enumerate(bands) if k not in used]
            for A, B in joins:
                ma, _ = _stack_band(bands, A)
                mb, _ = _stack_band(bands, B)
                nb.append((ma + mb, max(sum(x[k] for k in A), sum(x[k] for k in B)),
                           bands[A[0]][2], bands[B[0]][3], max(bands[k][4] for k in A + B)))
            full = [k for k, b in enumerate(nb) if (b[2], b[3]) == (t0, t1)]
            if len(full) > 1 and not any(nb[k][1] % max(nb[j][4] for j in full) for k in full):
                mem, off = _stack_band(nb, full)
                al = max(nb[k][4] for k in full)
                nb = [b for k, b in enumerate(nb) if k not in full] + [(mem, off, t0, t1, al)]
            bands = nb
            if len(bands) == n0:
                break
    return bands


def _stuck_events(bands) -> set:
    """Events where a band ends and another starts, unjoined, after folding.
    A guillotine-like tiling folds up completely (heavy-900-z: 900 requests ->
    1 band), so an event left stuck is where the fold went wrong: a join made
    there paired the wrong sides (near-zero slack: rival pairings within 1 %),
    leaving the true partners unmatched. On seen guillotine-1000-nz-788 the
    first fold made 30 joins at its 37 stuck events, 15 of them wrong (all but
    5 of its 20 wrong joins); the rest of its 478 joins were right."""
    ends = {b[3] for b in bands}
    return {b[2] for b in bands if b[2] in ends}


class Coalesced:
    """A pure part's requests joined by handovers (and, with `stack`, same-
    lifetime stacks), with the attributes the compiled search reads (n, windows,
    ext, align, start, end, ov). A band takes its members' largest extent and
    alignment; each member sits at the band's offset plus its own (`rel`)."""

    def __init__(self, sub, tol: float = 0.0, stack: bool = False, schedule=None,
                 quiet: bool = False, forbid=frozenset()):
        self.sub, self.schedule, self.quiet, self.forbid = sub, schedule, quiet, forbid
        self.nogoods = frozenset()
        self.depth, self.refolded = 0, False    # partner_nogoods: refolds deep; refolded yet
        self.joins = []              # (join, event) of every join made (join_lns' windows)
        if schedule is not None:     # partner folding (one window: its size is the cap)
            (lo, hi), = [w for r in (0, 1) for w in sub.windows[r]]
            log = []
            bands = _partner_bands(sub.ext, sub.start, sub.end, sub.align, hi - lo, schedule,
                                   quiet, forbid, log)
            stuck = _stuck_events(bands)
            self.joins = log
            self.nogoods = frozenset(k for k, t in log if t in stuck)
        else:
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

    def refold(self) -> "Coalesced | None":
        """`partner_nogoods`: the same partner fold with every join made at a
        stuck event forbidden (learned no-goods, kept from the folds before),
        or None when this fold made no join at a stuck event."""
        if not self.nogoods:
            return None
        ch = Coalesced(self.sub, 0.0, False, self.schedule, self.quiet,
                       self.forbid | self.nogoods)
        ch.depth = self.depth + 1
        return ch

    def key(self) -> bytes:
        """Two joinings are the same problem when members and offsets agree."""
        return self.gid.tobytes() + self.rel.tobytes()

    def expand(self, addr) -> list:
        """The joined placement as one address per original request."""
        return (np.asarray(addr, np.int64)[self.gid] + self.rel).tolist()
