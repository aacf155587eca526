"""Where a case's search goes: per variant of the compiled round robin (the
unfolded part, each handover fold, each partner fold and refold of a chain by
schedule, quiet and depth), its attempts, nodes, kernel seconds and outcomes,
plus the Python seconds spent folding. With the witness (generated cases) each
fold's count of strictly wrong bands (members not one band offset apart in the
witness; near-zero slack makes this strict count an over-estimate). An offline
diagnosis: the solver never reads the witness.

    .venv/bin/python experiments/placement_corpus/profile.py CASE.json [--limit 60] [--set key=value ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import compiler.place.coalesce as C  # noqa: E402
import compiler.place.skyline_jit as SJ  # noqa: E402
from compiler.place import PlaceConfig, solve  # noqa: E402
from compiler.place.__main__ import CLI_DEFAULTS  # noqa: E402
from compiler.place.dump import load  # noqa: E402
from compiler.place.instance import Instance, parts  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case")
    ap.add_argument("--limit", type=float, default=60.0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args(argv)
    p, x = load(a.case)
    wit = np.asarray(x["witness"], np.int64) if x and "witness" in x else None
    gidx = np.array(max(parts(Instance(p)), key=len))
    SJ.warm()
    stats, fold_s = {}, [0.0]
    init0, run0, cinit0 = SJ.CompiledSkyline.__init__, SJ.CompiledSkyline.run, C.Coalesced.__init__

    def init(self, sub, cfg):
        init0(self, sub, cfg)
        lab = "unfolded"
        if isinstance(sub, C.Coalesced):
            lab = (f"partner {sub.schedule} quiet={int(sub.quiet)} depth={sub.depth}"
                   if sub.schedule else "handover")
            if wit is not None and len(sub.gid) == len(gidx):
                base = wit[gidx] - sub.rel
                lab += " wrong=%d" % sum(len(set(base[sub.gid == k].tolist())) > 1
                                         for k in range(sub.n))
        stats[id(self)] = [f"{lab} n={self.n}", 0, 0, 0.0, []]

    def run(self, limit, pre, sky=True):
        t, n0 = time.perf_counter(), self.nodes
        r = run0(self, limit, pre, sky)
        s = stats[id(self)]
        s[1] += 1
        s[2] += self.nodes - n0
        s[3] += time.perf_counter() - t
        s[4].append(r)
        return r

    def cinit(self, *args, **kw):
        t = time.perf_counter()
        cinit0(self, *args, **kw)
        fold_s[0] += time.perf_counter() - t
    SJ.CompiledSkyline.__init__, SJ.CompiledSkyline.run, C.Coalesced.__init__ = init, run, cinit
    ov = dict(kv.split("=", 1) for kv in a.set)
    # the one-process search: a portfolio's workers are other processes, whose
    # counters this process never sees (portfolio_work.py compares the two)
    cfg = PlaceConfig.from_dict({**CLI_DEFAULTS, "time_limit_s": a.limit, "portfolio": False, **ov})
    sol = solve(p, cfg)
    print(f"{Path(a.case).name} {sol.status} {sol.seconds:.1f} s {sol.method}; folding (Python) "
          f"{fold_s[0]:.1f} s")
    for lab, k, nodes, s, rs in stats.values():
        print(f"  {lab:50s} attempts {k:4d} nodes {nodes:9d} {s:6.1f} s  "
              f"exhausted {rs.count(0)} placed {rs.count(1)}")


if __name__ == "__main__":
    main()
