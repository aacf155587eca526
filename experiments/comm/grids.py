"""A matmul's grids as plan sees them, best standalone estimate first: every feasible grid
with each ring kind (plan/ring.py with_rings: homes, ring copies, pieces read in place),
its estimate, what the busiest tile receives (its A block; its ring pieces, for ring 1: with
ring 0 B comes whole from its homes, in the estimate but not that column) and its memory figure.
The beam chooses among them in context; this shows how flat the choice is.

    python experiments/comm/grids.py OUTPUT [--top 40] [key=value ...]
e.g.  grids.py qkv.xw model.layers=27      (the matmul writing `qkv.xw`, So400m, 27 layers)"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import policy_of, run_phase, target_of  # noqa: E402
from compiler.plan import home_bytes, matmul_options, panel_weights, with_rings  # noqa: E402
from pipeline.config import compose  # noqa: E402


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    want, top = argv[0], 40
    if "--top" in argv:
        top = int(argv[argv.index("--top") + 1])
    keys = [a for a in argv[1:] if "=" in a]
    cfg = compose(["model=vit", "target=ipu21", *keys])
    g = run_phase("model", {}, cfg).graph
    t, pol = target_of(cfg), policy_of(cfg)
    panels = panel_weights(g, t, pol.panel_homes)
    homes = home_bytes(g, t, panels, pol.vector_homes)
    homes_r1 = home_bytes(g, t, panels, pol.vector_homes, over=t.region0_bytes)
    ops = [n for n, op in enumerate(g.ops) if op.kind == "matmul" and op.outputs[0] == want]
    if not ops:
        sys.exit(f"grids.py: no matmul writes {want!r}")
    n = ops[0]
    o = matmul_options(g, n, t, pol, homes, homes_r1)[0]
    a = (with_rings(g, {n: o}, t, panels, pol.ring_copies, pol.ring_in_place, pol.ring_units)[n]
         if pol.ring_homes else o).a
    ring = a.get("ring", np.zeros(len(a["gm"]), np.int64))
    zeros = np.zeros(len(a["gm"]), np.int64)
    print(f"{want}: {len(a['gm'])} grid choices; homes {homes:,} B of a {t.tile_bytes:,} B tile\n")
    print("| grid GMxGNxGK | ring / copies / in place | estimate | A block B | ring pieces B | memory B |\n"
          "|---|---|---:|---:|---:|---:|")
    for i in np.argsort(a["cycles"], kind="stable")[:top]:
        print(f"| {a['gm'][i]}x{a['gn'][i]}x{a['gk'][i]} | {ring[i]} / {a.get('copies', zeros)[i]} / "
              f"{a.get('inplace', zeros)[i]} | {a['cycles'][i]:,} | {a['recv_a'][i]:,} | "
              f"{a.get('ring_recv', zeros)[i]:,} | {a['mem'][i]:,} |")


if __name__ == "__main__":
    main(sys.argv[1:])
