"""Staircase folds (`stair_folds`, off by default: measured no gain): a partner
fold (coalesce.py) folded further with joins whose sides span several lifetime
groups.

Why it was tried (experiments/placement_corpus/README.md, "Issue #29, sixth
round"): the partner fold joins, at an event t, a subset of ONE lifetime group
of bands ending at t with a subset of ONE group starting at t. Even its oracle
(every join the witness calls wrong forbidden) stops at 150-210 bands on the
four cases no chain places, and at its stuck events (bands still ending and
starting there) 35-50 % of the true cuts span several groups a side (t=527 of
heldout heavy-800-nz-57721587: 9 enders of 4 groups against 6 starters of 3).

A staircase band keeps its members' shapes: its bottom is flat (the band's
offset), its top per time section the highest member live there
(skyline_stair.py searches such bands). A stair join at event t takes a set A
of bands ending at t (any groups) and a set B of bands starting at t (any
groups) whose heights at t agree within the schedule's last tolerance; each
side is stacked from the band's offset with the longest-lived at the bottom
(the shorter ones then rest on the longer: no hole), offsets rounded up to the
band's alignment. Which sets: per event with at most STAIR_LIM bands a side,
every pair of subsets with matching heights, the fewest bands first, then the
nearest heights, greedily disjoint; a join is kept only if it leaves every other
band at the event a possible partner (coalesce._orphans) and the folded live
bytes (holes included) stay within the capacity at every event. Passes repeat to
a fixpoint. Chains: a refold forbids every join (partner or stair) made at an
event still stuck, like `partner_nogoods`.

What it measured (experiments/placement_corpus/stairs.py, portfolio_work.py):
the stair folds are 2-4x smaller (heavy-800-nz-26457534: 185 -> 59 bands) but
the solver's own place nothing the partner folds do not (every miss stays
unknown at 60 s; on placed cases the work at the answer is unchanged). Their
joins, partner and stair, are wrong too often. With the witness's right joins
they are what the rectangles are not: seen heavy-1000-nz-800 (unknown at 180 s
for every fold) is placed in 0.1 s from a 33-band stair fold, while the same
right partner joins without stair joins (100 bands) are not placed in 4 s;
forbidding only the wrong stair joins is not enough (the partner joins' errors
remain). Hence the flag is off, kept for the ablation row and as the fold and
kernel for a search that would choose these joins (branch on them) rather than
take the first match.

Like every fold it is a restriction: any placement of the bands, expanded
(each member at band offset + rel), is a placement of the part, and the
independent validator checks it; a failure proves nothing.
"""
from __future__ import annotations

import numpy as np

from .coalesce import _orphans, _partner_bands

STAIR_LIM = 10        # an event with more bands a side than this: no stair join there
STAIR_CANDS = 4000    # candidate pairs per event at most (the fewest bands first)
STAIR_PASSES = 12     # fixpoint passes at most


def _tops(mem, ext, mstart, mend, at, side):
    """Top (rel + extent) of the members of a band touching event `at` from
    the left (side 'e': members ending there) or from the right ('s')."""
    if side == "e":
        return max((r + ext[i] for i, r in mem if mend[i] == at), default=0)
    return max((r + ext[i] for i, r in mem if mstart[i] == at), default=0)


def _profile(mem, ext, mstart, mend, ev, s, e):
    """A band's top per section of the event grid `ev` over [s, e)."""
    a, b = np.searchsorted(ev, s), np.searchsorted(ev, e)
    h = np.zeros(b - a, np.int64)
    for i, r in mem:
        x, y = np.searchsorted(ev, mstart[i]) - a, np.searchsorted(ev, mend[i]) - a
        np.maximum(h[x:y], r + ext[i], out=h[x:y])
    return a, h


def _stack(bands, ks, longest_first_key, ext, mstart, mend, ev, al):
    """Members of bands ks stacked from offset 0, the longest-lived first, each
    band resting on the highest top below it over its own lifetime."""
    lo = min(bands[k][1] for k in ks)
    hi = max(bands[k][2] for k in ks)
    a0 = np.searchsorted(ev, lo)
    top = np.zeros(np.searchsorted(ev, hi) - a0, np.int64)
    mem = []
    for k in sorted(ks, key=longest_first_key):
        m, s, e, _ = bands[k]
        a, h = _profile(m, ext, mstart, mend, ev, s, e)
        off = int(top[a - a0:a - a0 + len(h)].max())
        off = -(-off // al) * al
        mem += [(i, r + off) for i, r in m]
        np.maximum(top[a - a0:a - a0 + len(h)], off + h, out=top[a - a0:a - a0 + len(h)])
    return mem


def _subsets(side, h):
    """(sum of heights, bitmask) of every non-empty subset of `side`, sorted."""
    sums = np.zeros(1 << len(side), np.int64)
    for b, k in enumerate(side):
        sums[1 << b:2 << b] = sums[:1 << b] + int(h[k])
    return sums


def _key(bands, A, B):
    """A stair join's identity: the requests on each side."""
    return (frozenset(i for k in A for i, _ in bands[k][0]),
            frozenset(i for k in B for i, _ in bands[k][0]))


def stair_bands(sub, bands, cap, tol, forbid=frozenset(), log=None):
    """`bands` [(members [(i, rel)], start, end, align)] folded with stair joins
    (module docstring); `forbid`: joins (_key) never made; `log` receives (join,
    event) per join made. Returns (bands, joins made)."""
    ext, mstart, mend = sub.ext, sub.start, sub.end
    ev = np.unique(np.concatenate([np.asarray(mstart), np.asarray(mend)]))
    load = np.zeros(len(ev), np.int64)
    for m, s, e, _ in bands:
        a, h = _profile(m, ext, mstart, mend, ev, s, e)
        load[a:a + len(h)] += h
    made = 0
    for _ in range(STAIR_PASSES):
        ends, starts = {}, {}
        for k, (m, s, e, _) in enumerate(bands):
            ends.setdefault(e, []).append(k)
            starts.setdefault(s, []).append(k)
        used, new = set(), []
        for t in sorted(set(ends) & set(starts)):
            E, S = ends[t], starts[t]
            if len(E) > STAIR_LIM or len(S) > STAIR_LIM:
                continue
            h = {k: _tops(bands[k][0], ext, mstart, mend, t, "e") for k in E}
            h.update({k: _tops(bands[k][0], ext, mstart, mend, t, "s") for k in S})
            for A, B in _event_joins(E, S, h, tol):
                if used & set(A + B) or (forbid and _key(bands, A, B) in forbid):
                    continue
                got = _join(bands, A, B, ext, mstart, mend, ev, load, cap)
                if got is None:
                    continue
                used |= set(A + B)
                if log is not None:
                    log.append((_key(bands, A, B), t))
                new.append(got)
                made += 1
        if not new:
            break
        bands = [b for k, b in enumerate(bands) if k not in used] + new
    return bands, made


def _event_joins(E, S, h, tol):
    """Stair joins at one event, in the order tried: pairs of subsets (A of the
    enders, B of the starters) whose heights sum within `tol`, the fewest bands
    first, then the nearest, greedily disjoint; a join that would leave another
    band at the event without any possible partner (_orphans) is skipped."""
    se, ss = _subsets(E, h), _subsets(S, h)
    order = np.argsort(ss[1:], kind="stable") + 1
    sorted_s = ss[order]
    pop = lambda m: bin(int(m)).count("1")
    cands = []
    ma = np.arange(1, len(se))
    ma = ma[np.argsort([pop(m) for m in ma], kind="stable")]
    for m in ma:
        v = int(se[m])
        w = int(tol * v) + 1
        lo = np.searchsorted(sorted_s, v - w, "left")
        hi = np.searchsorted(sorted_s, v + w, "right")
        for j in range(lo, hi):
            vb = int(sorted_s[j])
            if abs(v - vb) <= tol * max(v, vb):
                mb = int(order[j])
                cands.append((pop(m) + pop(mb), abs(v - vb) / max(v, vb, 1), int(m), mb))
        if len(cands) >= STAIR_CANDS:
            break
    cands.sort()
    out, taken = [], set()
    le, ls = list(E), list(S)
    orph = _orphans(le, ls, h, tol)
    for _, _, m, mb in cands:
        A = [k for b, k in enumerate(E) if m >> b & 1]
        B = [k for b, k in enumerate(S) if mb >> b & 1]
        bits = set(A + B)
        if taken & bits:
            continue
        le2 = [k for k in le if k not in bits]
        ls2 = [k for k in ls if k not in bits]
        if _orphans(le2, ls2, h, tol) - orph:
            continue
        le, ls = le2, ls2
        taken |= bits
        out.append((A, B))
    return out


def _join(bands, A, B, ext, mstart, mend, ev, load, cap):
    """The stair band of A (ending at t) and B (starting at t), or None when its
    holes would lift the folded live bytes over `cap` somewhere (load updated
    when kept)."""
    al = max(bands[k][3] for k in A + B)
    mem = (_stack(bands, A, lambda k: (bands[k][1], k), ext, mstart, mend, ev, al)
           + _stack(bands, B, lambda k: (-bands[k][2], k), ext, mstart, mend, ev, al))
    s = min(bands[k][1] for k in A)
    e = max(bands[k][2] for k in B)
    a, h = _profile(mem, ext, mstart, mend, ev, s, e)
    old = np.zeros(len(h), np.int64)
    for k in A + B:
        m, bs, be, _ = bands[k]
        x, hk = _profile(m, ext, mstart, mend, ev, bs, be)
        old[x - a:x - a + len(hk)] += hk
    d = h - old
    if (load[a:a + len(h)] + d).max() > cap:
        return None
    load[a:a + len(h)] += d
    return mem, s, e, al


class StairFold:
    """A partner fold (coalesce._partner_bands, one schedule) folded further by
    stair joins: the attributes skyline_stair.StairSkyline reads (n, windows,
    start, end, align, ov, and per member gid, rel, mstart, mend, mext), and
    what search.py's round robin asks of a fold (key, expand, schedule, depth,
    refolded, refold: a chain of stair folds follows the partner fold's chain)."""

    stair = True

    def __init__(self, sub, schedule, quiet=False, forbid=frozenset(), sforbid=frozenset(),
                 tol: float | None = None):
        self.sub, self.windows = sub, sub.windows
        self.schedule, self.quiet, self.depth, self.refolded = schedule, quiet, 0, False
        self.forbid, self.sforbid, self.tol = forbid, sforbid, tol
        tol = schedule[-1] if tol is None else tol
        (lo, hi), = [w for r in (0, 1) for w in sub.windows[r]]
        plog, slog = [], []
        bands = [(m, s, e, al) for m, _, s, e, al in
                 _partner_bands(sub.ext, sub.start, sub.end, sub.align, hi - lo, schedule,
                                quiet, forbid, plog)]
        self.partner_n = len(bands)
        bands, self.joins = stair_bands(sub, bands, hi - lo, tol, sforbid, slog)
        ends = {b[2] for b in bands}
        stuck = {b[1] for b in bands if b[1] in ends}
        self.nogoods = frozenset(k for k, t in plog if t in stuck)
        self.snogoods = frozenset(k for k, t in slog if t in stuck)
        self._set(bands, sub.start, sub.end)

    def _set(self, bands, mstart, mend):
        sub = self.sub
        self.n = len(bands)
        self.gid = np.zeros(len(sub.ext), np.int64)
        self.rel = np.zeros(len(sub.ext), np.int64)
        for k, (m, _, _, _) in enumerate(bands):
            for i, r in m:
                self.gid[i], self.rel[i] = k, r
        self.start = [b[1] for b in bands]
        self.end = [b[2] for b in bands]
        self.align = [b[3] for b in bands]
        self.mstart, self.mend = np.asarray(mstart, np.int64), np.asarray(mend, np.int64)
        self.mext = np.asarray(sub.ext, np.int64)
        s, e = np.array(self.start, np.int64), np.array(self.end, np.int64)
        live = (s[:, None] < e[None, :]) & (s[None, :] < e[:, None])
        np.fill_diagonal(live, False)
        self.ov = [np.flatnonzero(row).tolist() for row in live]

    def mirrored(self) -> "StairFold":
        """`time_mirror`: the same bands and offsets with time reversed
        ([s, e) -> [t0 + t1 - e, t0 + t1 - s), members too): a placement of the
        mirror is one of the fold (which pairs are live together is unchanged)."""
        m = object.__new__(StairFold)
        m.__dict__.update(self.__dict__)
        t = int(self.mstart.min() + self.mend.max())
        m.start = [t - e for e in self.end]
        m.end = [t - s for s in self.start]
        m.mstart, m.mend = t - self.mend, t - self.mstart
        return m

    def refold(self) -> "StairFold | None":
        """`partner_nogoods` for stair folds: the same fold with every join
        (partner or stair) made at an event still stuck after folding forbidden,
        with what the folds before learned; None when no join was made there."""
        if not self.nogoods and not self.snogoods:
            return None
        ch = StairFold(self.sub, self.schedule, self.quiet, self.forbid | self.nogoods,
                       self.sforbid | self.snogoods, self.tol)
        ch.depth = self.depth + 1
        return ch

    def key(self) -> bytes:
        return b"stair" + self.gid.tobytes() + self.rel.tobytes()

    def expand(self, addr) -> list:
        return (np.asarray(addr, np.int64)[self.gid] + self.rel).tolist()


def join(rr, schedules, cfg, fold_work):
    """`stair_folds`: append to the round robin `rr` (search.py) the stair fold of
    each partner schedule (and with `partner_quiet_events` its quiet twin); their
    chains grow as the partner folds' do (rr.refold). Each fold counts as
    fold_work per request (search.FOLD_WORK), as a partner fold does."""
    for sch in schedules:
        for quiet in ((False, True) if cfg.partner_quiet_events else (False,)):
            sf = StairFold(rr.sub, sch, quiet)
            rr.work += fold_work * rr.sub.n
            if sf.n < rr.sub.n and sf.key() not in rr.seen:
                rr._add(sf, len(rr.tries))
