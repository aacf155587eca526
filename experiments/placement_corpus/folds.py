"""Why a near-zero-slack case stays unknown: the partner folds (coalesce.py)
against the generator's witness. An offline diagnosis (it reads the witness;
the solver never does): per fold variant of each part, how many bands are
wrong (members whose witness addresses are not one band offset apart), and
whether the fold with exactly those bands dissolved (an oracle repair) places
in a few seconds - i.e. whether a technique that finds the wrong joins would
close the case.

    .venv/bin/python experiments/placement_corpus/folds.py CASE.json... [--probe 5] [--joins]

"Wrong band" is strict (members exactly one band offset apart); --joins judges
each join with 1.5 % room (near-zero slack shrank the witness's rectangles).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compiler.place import PlaceConfig  # noqa: E402
import compiler.place.coalesce as C  # noqa: E402
from compiler.place.coalesce import PARTNER_SCHEDULES, Coalesced  # noqa: E402
from compiler.place.dump import load  # noqa: E402
from compiler.place.instance import Instance, SubInstance, parts  # noqa: E402
from compiler.place.skyline_jit import CompiledSkyline, warm  # noqa: E402


def wrong_bands(co, w):
    base = w - co.rel
    return [k for k in range(co.n) if len(set(base[co.gid == k].tolist())) > 1]


def dissolve(co, sub, bad):
    """The fold with bands `bad` replaced by their members (each alone)."""
    bad = set(bad)
    keep = [k for k in range(co.n) if k not in bad]
    new = {k: t for t, k in enumerate(keep)}
    gid, rel = co.gid.copy(), co.rel.copy()
    ext, st, en, al = ([co.ext[k] for k in keep], [co.start[k] for k in keep],
                       [co.end[k] for k in keep], [co.align[k] for k in keep])
    for i in range(len(gid)):
        if gid[i] in bad:
            gid[i], rel[i] = len(ext), 0
            ext.append(sub.ext[i]), st.append(sub.start[i]), en.append(sub.end[i])
            al.append(sub.align[i])
        else:
            gid[i] = new[gid[i]]
    co.gid, co.rel, co.ext, co.start, co.end, co.align, co.n = gid, rel, ext, st, en, al, len(ext)
    s, e = np.array(st), np.array(en)
    live = (s[:, None] < e[None, :]) & (s[None, :] < e[:, None])
    np.fill_diagonal(live, False)
    co.ov = [np.flatnonzero(r).tolist() for r in live]
    return co


def _fits(w, ext, mem, height):
    """Members [(request, offset)] lie within `height` (+1.5 %: near-zero slack
    shrank every witness rectangle by up to 1 %) of each other in the witness."""
    lo = min(int(w[i]) for i, _ in mem)
    hi = max(int(w[i]) + ext[i] for i, _ in mem)
    return hi - lo <= height * 1.015 + 1


def _trace(sub, w, sch, quiet):
    """Each join the fold makes, judged against the witness, per folding pass:
    (joins, right, wrong though both sides were right, on a wrong side, examples
    (event span of A, |A|, |B|, extent))."""
    calls, orig = [], C._stack_band

    def spy(bands, ks, off0=0):
        r = orig(bands, ks, off0)
        calls.append((id(bands), r[0], r[1], len(ks), bands[ks[0]][2:4]))
        return r
    C._stack_band = spy
    try:
        Coalesced(sub, 0.0, False, sch, quiet)
    finally:
        C._stack_band = orig
    passes = []
    for c in calls:      # a pass's joins stack A then B from the same band list
        if passes and passes[-1][0] == c[0]:
            passes[-1][1].append(c)
        else:
            passes.append((c[0], [c]))
    out = []
    for _, cs in passes:
        if len(cs) % 2:
            continue     # the whole-part stack at the end of a pass
        good = fresh = inh = 0
        ex = []
        for a, b in zip(cs[::2], cs[1::2]):
            if not (_fits(w, sub.ext, a[1], a[2]) and _fits(w, sub.ext, b[1], b[2])):
                inh += 1
            elif _fits(w, sub.ext, a[1] + b[1], max(a[2], b[2])):
                good += 1
            else:
                fresh += 1
                ex.append((a[4], a[3], b[3], max(a[2], b[2])))
        out.append((len(cs) // 2, good, fresh, inh, ex))
    return out


def probe(co, cfg, seconds):
    cs = CompiledSkyline(co, cfg)
    t, rnd = time.perf_counter(), 0
    while time.perf_counter() - t < seconds:
        for seed in (0, 1, 2, 3, 4 + rnd):
            for sky in (True, False):
                r = cs.run(cs.n * 2 << rnd, cs.preorders(seed), sky)
                if r >= 0:
                    return ("placed" if r == 1 else "exhausted"), time.perf_counter() - t
        rnd += 1
    return "budget", time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--probe", type=float, default=5.0)
    ap.add_argument("--joins", action="store_true", help="per folding pass: joins right / wrong")
    a = ap.parse_args(argv)
    warm()
    cfg = PlaceConfig()
    for f in a.cases:
        p, x = load(f)
        inst = Instance(p)
        w_all = np.asarray(x["witness"], np.int64)
        for g in parts(inst):
            if len(g) < 50:
                continue
            sub = SubInstance(inst, g)
            w = w_all[g] - min(lo for lo, _ in sub.windows[0] + sub.windows[1])
            for sch in PARTNER_SCHEDULES:
                for quiet in (False, True):
                    joins = _trace(sub, w, sch, quiet) if a.joins else None
                    co = Coalesced(sub, 0.0, False, sch, quiet)
                    bad = wrong_bands(co, w)
                    st, dt = probe(co, cfg, a.probe)
                    n0 = co.n
                    fix = dissolve(co, sub, bad)
                    st2, dt2 = probe(fix, cfg, a.probe)
                    print(f"{Path(f).name} part {len(g)} schedule {sch} quiet={quiet}: "
                          f"{n0} bands, {len(bad)} wrong; "
                          f"fold {st} {dt:.1f} s; wrong dissolved ({fix.n} bands) {st2} {dt2:.1f} s",
                          flush=True)
                    for it, (n, good, fresh, inh, ex) in enumerate(joins or []):
                        print(f"    pass {it}: {n} joins, {good} right, {fresh} wrong of two right "
                              f"sides, {inh} on a wrong side; e.g. {ex[:3]}")


if __name__ == "__main__":
    main()
