"""Where a pipeline step goes (issue #27): each group's supersteps before its layer Repeat
(group 0's patch embedding), in one Repeat iteration (a layer) and after it (group G-1's head),
against the same three regions merged as compiler/expand/stages.py `align` merges them
(each merged superstep as long as its longest group's). Groups on tiles // G tiles, batch 1,
the held-out photo (plan + expand of each group, compiler/spatial_tiles.py Fits).

    python experiments/throughput/step_parts.py f16|fp8 G [key=value ...]

The merged step is these three (the body times the layer count) plus the host link of one
item in and out and the shift between groups, which are the pipeline's own supersteps."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.expand.stages import align  # noqa: E402
from group_tiles import args, group_fits  # noqa: E402

REGIONS = ("before the Repeat", "one layer", "after the Repeat")


def spans(g) -> list:
    b0, b1 = g.body_steps()
    return [(0, b0), (b0, b1), (b1, len(g.steps))]


if __name__ == "__main__":
    act, G, extra = args(__doc__, 3)
    fits, t = group_fits(act, G, extra)
    w = t.tiles // G
    groups = []
    for k in range(G):
        e = fits(k, w)[1]
        if e.rejection:
            sys.exit(f"group {k} on {w} tiles: {e.rejection.message}")
        groups.append(e.finalists[0].tilegraph)
    print(f"| region | {' | '.join(f'group {k}' for k in range(G))} | merged |")
    print(f"|---|{'---:|' * (G + 1)}")
    total = 0
    for r, name in enumerate(REGIONS):
        seqs = [[(g.steps[i], int(g.analysis["step_cycles"][i])) for i in range(*spans(g)[r])] for g in groups]
        kinds, at = align(seqs)
        merged = np.zeros(len(kinds), np.int64)
        for seq, pos in zip(seqs, at):
            np.maximum.at(merged, np.asarray(pos, np.int64), np.asarray([c for _, c in seq], np.int64))
        total += int(merged.sum()) * (groups[0].count if r == 1 else 1)
        print(f"| {name} | {' | '.join(f'{sum(c for _, c in s):,}' for s in seqs)} | {int(merged.sum()):,} |")
    print(f"\nthe three merged, the layer {groups[0].count} times: {total:,} cycles")
