"""How evenly a throughput row's weight homes fill the tiles, and what fills the fullest one:
expand's best finalist (no placement), per tile its home bytes (every `.home` request's whole
sequence extent) against its free bytes (expand's footprint: peak live + support).

    python experiments/throughput/homes_spread.py B f16|fp8 [key=value ...]
e.g.  homes_spread.py 6 f16"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.expand.analysis import _span  # noqa: E402
from compiler.phases import run_phase, target_of  # noqa: E402
from experiments.comm.footprint import kind, live_at  # noqa: E402
from experiments.throughput.run import overrides  # noqa: E402
from pipeline.config import compose  # noqa: E402


def main(argv):
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    cfg = compose(overrides(int(argv[0]), argv[1], argv[2:]))
    res = {"model": run_phase("model", {}, cfg)}
    res["plan"] = run_phase("plan", res, cfg)
    res["expand"] = run_phase("expand", res, cfg)
    if res["expand"].rejection:
        print("rejected", res["expand"].rejection)
        return
    f = res["expand"].finalists[0]
    tg, a, t = f.tilegraph, f.analysis, target_of(cfg)
    r = tg.req
    home = np.array([tg.names[n].endswith(".home") for n in r["name"]], bool)
    hb = np.bincount(r["tile"][home], _span(r)[home], minlength=tg.tiles)
    fp = np.asarray(a["footprint_bytes"])
    free, rest = t.tile_bytes - fp, fp - hb
    near = np.flatnonzero(free <= free.min() + 8192)
    print(f"{f.candidate.label}\n  home bytes a tile: mean {hb.mean():.0f}, min {hb.min():.0f}, max {hb.max():.0f}")
    print(f"  free bytes: least {int(free.min())}, median {int(np.median(free))}; "
          f"least if every tile held the mean home bytes: {int(t.tile_bytes - (rest + hb.mean()).max())}")
    print(f"  {len(near)} tiles within 8 KB of the least free hold {hb[near].min():.0f}-{hb[near].max():.0f} B of homes; "
          f"correlation of free and home bytes over the tiles {np.corrcoef(free, hb)[0, 1]:.3f}")
    w = int(np.argmin(free))
    by = defaultdict(int)
    for n, b in live_at(tg, w, int(a["peak_event"][w])).items():
        by[kind(n)] += b
    print(f"  tile {w} at its peak (event {int(a['peak_event'][w])}): "
          + ", ".join(f"{k} {b}" for k, b in sorted(by.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main(sys.argv[1:])
