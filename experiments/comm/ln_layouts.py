"""A LayerNorm in its input's layout, against row halves (#26, "layout propagation").

    python experiments/comm/ln_layouts.py GRID [GRID ...]     e.g. 6x9x27 3x18x27

The LayerNorms of a So400m layer read the residual stream, laid out as fc2's output: a
gm x gn x gk grid's C blocks, each block's rows shared by its gk reducers. Today each
LayerNorm first converts that to row halves (policy.ln_halves: one row a tile pair, 576
columns each; one exchange superstep, ~1,054 cycles in `steps.py -v`). Left in place, each
tile would hold ceil(ceil(M / gm) / gk) rows of C / gn columns: partial statistics there,
an exchange of (gn - 1) x 8 B a row to the row's other column tiles (as the halves' swap),
then the whole row's statistics from gn partials and the rest over its columns. This prints
both from the cost functions plan, expand and the simulator charge (compiler/costs/vector.py
layernorm_cycles; the gn partials' combine as one BinaryOp1D ADD f32 over gn x rows, as the
halves' two: the vertex assumed there), so the kernel side of the choice can be read before
building it."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.costs import vector as vc  # noqa: E402
from compiler.costs.vertices import PERF, binary_op_1d_cycles  # noqa: E402
from compiler.phases import target_of  # noqa: E402
from pipeline.config import compose  # noqa: E402

M, C, STATS = 730, 1152, 8          # So400m's rows (729 tokens, aligned) and width; f32 (mean, M2)


def main(grids: list[str]) -> None:
    t = target_of(compose())
    W, V = t.workers, t.vector_bytes_per_cycle
    ln = lambda r, c, f: int(vc.layernorm_cycles(r, c, W, V, f))
    swap = lambda nbytes: t.exchange_phase_cycles + -(-nbytes // t.exchange_bytes_per_cycle) + t.sync_cycles
    halves = ln(1, C // 2, 1) + swap(STATS) + ln(1, C // 2, 2)
    print(f"row halves (1 x {C // 2} a tile): stats {ln(1, C // 2, 1)} + swap {swap(STATS)} + finish "
          f"{ln(1, C // 2, 2)} = {halves}, plus the conversion's exchange superstep")
    add = lambda n: int(binary_op_1d_cycles(n, PERF[("ADD", "f32")], 4, W, V))
    for g in grids:
        gm, gn, gk = (int(x) for x in g.split("x"))
        r, c = -(-(-(-M // gm)) // gk), C // gn
        finish = ln(r, c, 2) - add(2 * r) + add(gn * r)
        place = ln(r, c, 1) + swap((gn - 1) * STATS * r) + finish
        print(f"in place, {g} ({r} x {c} a tile): stats {ln(r, c, 1)} + exchange {swap((gn - 1) * STATS * r)} "
              f"+ finish {finish} = {place}: {place - halves:+d} against halves, before the conversion it saves")


if __name__ == "__main__":
    main(sys.argv[1:] or ["6x9x27", "3x18x27"])
