"""Why a batch plan is slow to place: for each expand finalist of a throughput row, its
distinct tile problems and how many fail every greedy order (compiler/place/greedy.py);
with --solve N, `compiler.place.solve` (under the trial's policy.place) on the first N of those
of finalist K (--finalist K, default 0), the method that ended each (pinned, search, canonical,
cpsat, unknown) and the seconds they took.

    python experiments/throughput/place_probe.py B f16|fp8 [--solve N] [--finalist K] [key=value ...]
e.g.  place_probe.py 6 f16 --solve 570 ; place_probe.py 6 f16 policy.place.pin_whole_lifetime=false --solve 12"""
from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.expand.analysis import profile_bytes  # noqa: E402
from compiler.phases import place_config, run_phase, target_of  # noqa: E402
from compiler.place import greedy  # noqa: E402
from compiler.place.config import PlaceConfig  # noqa: E402
from compiler.place.instance import Instance  # noqa: E402
from compiler.place.phase import distinct, reserve_support, tile_problems  # noqa: E402
from compiler.place.solve import solve  # noqa: E402
from experiments.throughput.run import overrides  # noqa: E402
from pipeline.config import compose  # noqa: E402


def greedy_fails(p) -> bool:
    inst = Instance(p)
    return all(greedy.place_order(inst, order)[1] >= 0 for _, order in greedy.orders(inst, PlaceConfig()))


def main(argv):
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    b, act = int(argv[0]), argv[1]
    opt = lambda name: int(argv[argv.index(name) + 1]) if name in argv else 0
    n_solve, pick = opt("--solve"), opt("--finalist")
    cfg = compose(overrides(b, act, [a for a in argv[2:] if "=" in a]))
    res = {"model": run_phase("model", {}, cfg)}
    res["plan"] = run_phase("plan", res, cfg)
    res["expand"] = run_phase("expand", res, cfg)
    t, pcfg = target_of(cfg), place_config(cfg)
    for k, f in enumerate(res["expand"].finalists):
        tg = f.tilegraph
        probs, _ = tile_problems(tg, reserve_support(tg.analysis, tg.tiles, profile_bytes(tg), t), t)
        _, uniq, first = distinct(probs)
        failing = [probs[first[h]] for h in uniq if greedy_fails(probs[first[h]])]
        print(f"finalist {k} ({f.candidate.label}): {len(uniq)} distinct tile problems, "
              f"{len(failing)} fail every greedy order")
        if k == pick and n_solve:
            ends, secs = Counter(), []
            for p in failing[:n_solve]:
                t0 = time.perf_counter()
                s = solve(p, pcfg)
                secs.append(time.perf_counter() - t0)
                ends[f"{s.status}/{s.method}"] += 1
            print(f"  solve on {len(secs)} of them: {dict(ends)}; seconds median {np.median(secs):.2f}, "
                  f"max {max(secs):.2f}, total {sum(secs):.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
