"""How far a partial placement of a stuck case is from complete, and what
`lns_repair` (compiler/place/repair.py) makes of it, in deterministic figures
(requests and area left, counted work); the witness is never read.

Per case (its largest part):
* the compiled skyline's path when an attempt hits its node limit (CompiledSkyline
  `partial`), on the unfolded part and on the first partner fold, at 2n<<4 and
  2n<<8 nodes: requests placed of n, share of the area (bytes x lifetime);
* the repair's start (repair.best_start: greedy first fit with skips, on the part
  and on its partner folds and quiet twins of both schedules): area, requests left;
* the repair from that start at a fixed work budget: steps, windows that gained,
  area and requests left after, whether complete.

    .venv/bin/python experiments/placement_corpus/repair_profile.py CASE.json ... [--work 2200e6]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compiler.place import PlaceConfig  # noqa: E402
from compiler.place import repair as R  # noqa: E402
from compiler.place.coalesce import PARTNER_SCHEDULES, PORTFOLIO_SCHEDULES, Coalesced  # noqa: E402
from compiler.place.dump import load  # noqa: E402
from compiler.place.instance import Instance, SubInstance, parts  # noqa: E402
from compiler.place.skyline_jit import CompiledSkyline, warm  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--work", type=float, default=2200e6, help="repair work budget (40 windows)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args(argv)
    warm()
    cfg = PlaceConfig().override(**dict(kv.split("=", 1) for kv in a.set))
    for case in a.cases:
        p, _ = load(case)
        inst = Instance(p)
        sub = SubInstance(inst, max(parts(inst), key=len))
        area = R._area(sub)
        share = lambda addr: area[np.asarray(addr) >= 0].sum() / area.sum()
        print(f"{Path(case).name}: part of {sub.n} requests", flush=True)
        fold = Coalesced(sub, 0.0, False, PARTNER_SCHEDULES[0], False)
        for lab, prob in (("unfolded", sub), ("partner fold", fold)):
            cs = CompiledSkyline(prob, cfg)
            for k in (4, 8):
                r = cs.run(2 * prob.n << k, cs.preorders(0), True)
                if r != -1:
                    print(f"  skyline {lab} 2n<<{k}: r={r}")
                    continue
                b = cs.partial
                x = b if prob is sub else np.where(b[fold.gid] >= 0, b[fold.gid] + fold.rel, -1)
                print(f"  skyline {lab} (n={prob.n}) at 2n<<{k} nodes: path {int((b >= 0).sum())} "
                      f"placed (deepest {cs.deepest}), area {share(x):.3f}, requests left "
                      f"{int((x < 0).sum())}", flush=True)
        folds = [Coalesced(sub, 0.0, False, s, q) for s in PARTNER_SCHEDULES + PORTFOLIO_SCHEDULES
                 for q in (False, True)]
        t = time.perf_counter()
        start = R.best_start(sub, folds)
        print(f"  repair start (greedy, part + {len(folds)} folds): area {share(start):.4f}, "
              f"requests left {int((start < 0).sum())}", flush=True)
        log = []
        addr, work = R.repair(sub, cfg, start, work_budget=int(a.work), log=log)
        # the log keeps the area and requests left before each window: the last logged
        last = log[-1][4] / area.sum() if log else share(start)
        left = log[-1][5] if log else int((start < 0).sum())
        print(f"  repair at {a.work / 1e6:.0f} M work: {len(log)} windows, "
              f"{sum(x[3] for x in log)} gained, area {last:.4f} -> requests left {left} "
              f"(before the last window), complete {addr is not None}, work {work / 1e6:.0f} M, "
              f"{time.perf_counter() - t:.0f} s wall", flush=True)


if __name__ == "__main__":
    main()
