"""Staircase folds against the witness (issue #29, sixth round; offline: it
reads the witness, the solver never does).

1. Why a right fold stops: the partner fold of a case's largest part, refolded
   with every join the witness judges wrong forbidden (the fourth round's
   oracle); at each event where it is still stuck (bands ending and starting
   there, unjoined) the true cuts are read off the witness (enders and starters
   whose witness address ranges overlap form one cut). Per cut: how many
   lifetime groups each side spans (1 and 1 with equal heights: a partner join
   could express it; more: a staircase).
2. Whether staircase folds (stairfold.py) would place it: the solver's own
   stair folds (no witness) and a clean-oracle stair fold (partner and stair
   joins forbidden until every band is contiguous in the witness), each probed
   with the stair kernel for --probe seconds; and the same oracle's partner
   fold without stair joins (exact profiles).

    .venv/bin/python experiments/placement_corpus/stairs.py CASE.json... [--rounds 8] [--probe 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import compiler.place.stairfold as SF  # noqa: E402
from compiler.place import PlaceConfig  # noqa: E402
from compiler.place.coalesce import PARTNER_SCHEDULES, Coalesced, _partner_bands  # noqa: E402
from compiler.place.dump import load  # noqa: E402
from compiler.place.instance import Instance, SubInstance, parts  # noqa: E402
from compiler.place.skyline_jit import CompiledSkyline  # noqa: E402
from compiler.place.skyline_stair import StairSkyline  # noqa: E402


def _fits(w, ext, mem, height):
    lo = min(int(w[i]) for i in mem)
    hi = max(int(w[i]) + ext[i] for i in mem)
    return hi - lo <= height * 1.015 + 1


def oracle_fold(sub, w, sch, quiet, rounds):
    """The fold with every join the witness judges wrong forbidden, refolded
    until none is left (or `rounds`): (bands, forbid)."""
    forbid = frozenset()
    (lo, hi), = [x for r in (0, 1) for x in sub.windows[r]]
    for _ in range(rounds):
        log = []
        bands = _partner_bands(sub.ext, sub.start, sub.end, sub.align, hi - lo, sch, quiet,
                               forbid, log)
        bad = set()
        for (A, B), _t in log:
            ea, eb = sum(sub.ext[i] for i in A), sum(sub.ext[i] for i in B)
            if not _fits(w, sub.ext, A | B, max(ea, eb)):
                bad.add((A, B))
        if not bad:
            break
        forbid = forbid | bad
    return bands, forbid


def cuts_at(bands, t, w, ext):
    """The true cuts at event t: components of enders/starters whose witness
    address ranges overlap."""
    E = [k for k, b in enumerate(bands) if b[3] == t]
    S = [k for k, b in enumerate(bands) if b[2] == t]
    rng = {}
    for k in E + S:
        base = {int(w[i]) - r for i, r in bands[k][0]}
        b0 = min(base)
        rng[k] = (b0, b0 + bands[k][1])
    par = {k: k for k in E + S}

    def find(k):
        while par[k] != k:
            k = par[k]
        return k
    for a in E:
        for b in S:
            (a0, a1), (b0, b1) = rng[a], rng[b]
            if min(a1, b1) - max(a0, b0) > 0.25 * min(a1 - a0, b1 - b0):
                par[find(a)] = find(b)
    comp = {}
    for k in E + S:
        comp.setdefault(find(k), []).append(k)
    out = []
    for ks in comp.values():
        A = [k for k in ks if k in E]
        B = [k for k in ks if k in S]
        if not A or not B:
            continue
        va, vb = sum(bands[k][1] for k in A), sum(bands[k][1] for k in B)
        out.append(dict(nA=len(A), nB=len(B), gA=len({bands[k][2] for k in A}),
                        gB=len({bands[k][3] for k in B}), diff=abs(va - vb) / max(va, vb),
                        size=max(va, vb)))
    return out


def probe(fold, seconds):
    """The stair kernel's restarts on `fold` for `seconds`: (verdict, s, deepest)."""
    ss = StairSkyline(fold, PlaceConfig())
    t, rnd, deep = time.perf_counter(), 0, 0
    while time.perf_counter() - t < seconds:
        for seed in (0, 1, 2, 3, 4 + rnd):
            r = ss.run(ss.n * 2 << rnd, ss.preorders(seed))
            deep = max(deep, ss.deepest)
            if r >= 0:
                return ("placed" if r == 1 else "exhausted"), time.perf_counter() - t, deep
        rnd += 1
    return "budget", time.perf_counter() - t, deep


def clean_oracle(sub, w, sch, rounds=30, partner=True):
    """Partner and stair joins forbidden, the smallest non-contiguous one inside
    each band not contiguous in the witness first, until every band is: the
    stair fold whose every band sits in one piece in the witness (forbid, sforbid).
    partner=False: stair joins only (the partner joins as the solver makes them)."""
    X = np.asarray(sub.ext)
    (lo, hi), = [x for r in (0, 1) for x in sub.windows[r]]
    forbid, sforbid = frozenset(), frozenset()
    for _ in range(rounds):
        sf = SF.StairFold(sub, sch, False, forbid, sforbid)
        bad = []
        for k in range(sf.n):
            idx = np.flatnonzero(sf.gid == k)
            if (w[idx] + X[idx]).max() - w[idx].min() > 1.015 * (sf.rel[idx] + X[idx]).max() + 1:
                bad.append(set(idx.tolist()))
        if not bad:
            break
        plog, slog = [], []
        pb = _partner_bands(sub.ext, sub.start, sub.end, sub.align, hi - lo, sch, False, forbid,
                            plog)
        SF.stair_bands(sub, [(m, s, e, al) for m, _, s, e, al in pb], hi - lo, sch[-1], sforbid,
                       slog)
        newp, news = set(), set()
        for b in bad:
            js = sorted([(len(A | B), 0, (A, B)) for (A, B), _ in plog if partner and A | B <= b]
                        + [(len(A | B), 1, (A, B)) for (A, B), _ in slog if A | B <= b],
                        key=lambda j: j[0])
            for _, kind, (A, B) in js:
                m = np.array(sorted(A | B))
                if (w[m] + X[m]).max() - w[m].min() > 1.015 * max(X[list(A)].sum(),
                                                                  X[list(B)].sum()) + 1:
                    (news if kind else newp).add((A, B))
                    break
        if not newp and not news:
            break
        forbid, sforbid = forbid | newp, sforbid | news
    return forbid, sforbid


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--probe", type=float, default=3.0)
    a = ap.parse_args(argv)
    for f in a.cases:
        p, x = load(f)
        inst = Instance(p)
        w_all = np.asarray(x["witness"], np.int64)
        g = max(parts(inst), key=len)
        sub = SubInstance(inst, g)
        w = w_all[g] - min(lo for lo, _ in sub.windows[0] + sub.windows[1])
        for sch in PARTNER_SCHEDULES[:1]:
            for quiet in (False, True):
                bands, forbid = oracle_fold(sub, w, sch, quiet, a.rounds)
                ends = {b[3] for b in bands}
                stuck = sorted({b[2] for b in bands if b[2] in ends})
                cuts = [c for t in stuck for c in cuts_at(bands, t, w, sub.ext)]
                kinds = Counter(("1x1" if c["diff"] <= 0.01 else "1x1-unequal")
                                if c["gA"] == 1 and c["gB"] == 1 else "stair" for c in cuts)
                one = [c for c in cuts if c["gA"] == 1 and c["gB"] == 1]
                print(f"{Path(f).name} part {len(g)} {sch} quiet={int(quiet)}: oracle fold "
                      f"{len(bands)} bands ({len(forbid)} joins forbidden), {len(stuck)} stuck "
                      f"events, cuts there {dict(kinds)}; stair sides: groups A "
                      f"{sorted(Counter(c['gA'] for c in cuts if c not in one).items())} B "
                      f"{sorted(Counter(c['gB'] for c in cuts if c not in one).items())}",
                      flush=True)
                co = Coalesced(sub, 0.0, False, sch, quiet)
                own = SF.StairFold(sub, sch, quiet)
                v, dt, deep = probe(own, a.probe)
                print(f"    the solver's own partner fold {co.n} bands; its stair fold {own.n} "
                      f"bands ({own.joins} stair joins): {v} {dt:.1f} s, deepest {deep}")
            forbid, sforbid = clean_oracle(sub, w, sch, partner=False)
            sf = SF.StairFold(sub, sch, False, forbid, sforbid)
            v, dt, deep = probe(sf, a.probe)
            print(f"    stair-only oracle: {len(sforbid)} of the stair joins forbidden -> {sf.n} "
                  f"bands ({sf.joins} stair joins): {v} {dt:.1f} s, deepest {deep}", flush=True)
            forbid, sforbid = clean_oracle(sub, w, sch)
            sf = SF.StairFold(sub, sch, False, forbid, sforbid)
            v, dt, deep = probe(sf, a.probe)
            ex = SF.StairFold(sub, sch, False, forbid, sforbid, tol=-1.0)
            v2, dt2, _ = probe(ex, a.probe)
            # the slack the fold leaves: its bands as rectangles (as tall as the larger
            # side: skyline_jit) against their exact tops (skyline_stair)
            rect = CompiledSkyline(Coalesced(sub, 0.0, False, sch, False, forbid), PlaceConfig())
            exact = StairSkyline(ex, PlaceConfig())
            slack = [1 - x.tot0.max() / (x.cap - x.base) for x in (rect, exact)]
            print(f"    clean-oracle stair fold {sf.n} bands ({sf.joins} stair joins, "
                  f"{len(forbid)} + {len(sforbid)} forbidden): {v} {dt:.1f} s, deepest {deep}; "
                  f"without stair joins {ex.n} bands: {v2} {dt2:.1f} s; least slack as "
                  f"rectangles {100 * slack[0]:.3f} %, exact tops {100 * slack[1]:.3f} %",
                  flush=True)


if __name__ == "__main__":
    main()
