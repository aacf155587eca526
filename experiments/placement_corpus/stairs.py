"""Why a right fold stops (issue #29, sixth round): the partner fold of a case's
largest part, refolded with every join the witness judges wrong forbidden (an
oracle, as in the fourth round), then, at each event where it is still stuck
(bands ending and starting there, unjoined), the true cuts read off the witness:
the enders and starters whose witness address ranges overlap form one cut
(A, B). Per cut: how many lifetime groups each side spans (1 and 1: a
one-group-a-side join could express it; more: a staircase), the relative
difference of the two sums, and which of the fold's guards would refuse it.
An offline diagnosis (it reads the witness; the solver never does).

    .venv/bin/python experiments/placement_corpus/stairs.py CASE.json... [--rounds 8]
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compiler.place.coalesce import PARTNER_SCHEDULES, Coalesced, _partner_bands  # noqa: E402
from compiler.place.dump import load  # noqa: E402
from compiler.place.instance import Instance, SubInstance, parts  # noqa: E402


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--rounds", type=int, default=8)
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
                kinds = Counter("1x1" if c["gA"] == 1 and c["gB"] == 1 else "stair"
                                for c in cuts)
                one = [c for c in cuts if c["gA"] == 1 and c["gB"] == 1]
                print(f"{Path(f).name} part {len(g)} {sch} quiet={int(quiet)}: oracle fold "
                      f"{len(bands)} bands ({len(forbid)} joins forbidden), {len(stuck)} stuck "
                      f"events, cuts there {dict(kinds)}; stair sides: groups A "
                      f"{sorted(Counter(c['gA'] for c in cuts if c not in one).items())} B "
                      f"{sorted(Counter(c['gB'] for c in cuts if c not in one).items())}; "
                      f"1x1 cuts' sum diff % {[round(100 * c['diff'], 2) for c in one][:12]}",
                      flush=True)
                co = Coalesced(sub, 0.0, False, sch, quiet)
                print(f"    (the solver's own first fold: {co.n} bands)")


if __name__ == "__main__":
    main()
