"""`join_lns` offline (issue #29, seventh round): walk the join search of a case's
largest part by itself and judge its incumbents against the generator's witness
(the solver never reads it). Per (0, 1 %) partner fold, plain and quiet: the root
fold, a clean-oracle fold (every join the witness calls wrong forbidden, refolded
until none is left) and the incumbent every 25 moves: bands, wrong bands (members
more than 1.5 % of the band's extent apart in the witness: folds.py `_fits`) and the
probe score join_lns keeps (share of the part's area on the probe's path).

    .venv/bin/python experiments/placement_corpus/join_walk.py CASE.json [--moves 100]
        [--window 8] [--probe 64]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from compiler.place import PlaceConfig  # noqa: E402
from compiler.place.coalesce import PARTNER_SCHEDULES, Coalesced  # noqa: E402
from compiler.place.dump import load  # noqa: E402
from compiler.place.instance import Instance, SubInstance, parts  # noqa: E402
from compiler.place.joinlns import JoinLNS, path_area  # noqa: E402
from compiler.place.skyline_jit import CompiledSkyline, warm  # noqa: E402
from folds import _fits  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--moves", type=int, default=100)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--probe", type=int, default=64)
    a = ap.parse_args(argv)
    warm()
    cfg = PlaceConfig()
    p, extra = load(a.case)
    inst = Instance(p)
    idx = max(parts(inst), key=len)
    sub = SubInstance(inst, idx)
    w = np.asarray(extra["witness"], np.int64)[idx]

    def wrong_bands(co):
        return sum(1 for k in range(co.n) if (co.gid == k).sum() > 1 and not _fits(
            w, sub.ext, [(i, 0) for i in np.flatnonzero(co.gid == k)], co.ext[k]))

    def wrong_joins(co):
        return {jk for jk, _ in co.joins if not _fits(
            w, sub.ext, [(i, 0) for i in jk[0] | jk[1]], co.ext[co.gid[next(iter(jk[0]))]])}

    def score(co):
        x = CompiledSkyline(co, cfg)
        r = x.run(a.probe * co.n, x.preorders(0), cfg.canonical_skyline)
        return {1: 1.0, 0: -1.0}.get(r) or path_area(co, sub, x.partial)

    for quiet in (False, True):
        root = Coalesced(sub, 0.0, False, PARTNER_SCHEDULES[0], quiet)
        oracle = root
        for _ in range(12):
            wj = wrong_joins(oracle)
            if not wj:
                break
            oracle = Coalesced(sub, 0.0, False, PARTNER_SCHEDULES[0], quiet, oracle.forbid | wj)
        print(Path(a.case).name, f"part {sub.n}", "quiet" if quiet else "plain", flush=True)
        for name, co in (("root", root), ("oracle", oracle)):
            print(f"  {name:7s} bands {co.n}, wrong bands {wrong_bands(co)}, "
                  f"score {score(co):.3f}", flush=True)
        L = JoinLNS(root, 0, a.window, a.probe)
        t = time.process_time()
        for m in range(a.moves):
            addr, *_ = L.move(CompiledSkyline, cfg)
            if addr is not None:
                print(f"  placed at move {m + 1}")
                break
            if (m + 1) % 25 == 0:
                print(f"  move {m + 1}: bands {L.inc.n}, wrong bands {wrong_bands(L.inc)}, "
                      f"score {L.score:.3f}, kept {sum(1 for e in L.log if e[-1])}, "
                      f"forbidden {len(L.inc.forbid)}, {time.process_time() - t:.1f} s CPU",
                      flush=True)


if __name__ == "__main__":
    main()
