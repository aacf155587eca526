"""Where a layer's vector cycles go (#26's vector gap): for every compute superstep of the
Repeat body, the kernels on its critical tile (the busiest, the one the step waits for) other
than MATMUL and COPY, grouped by kernel and shape, with their cycles, and how many tiles run
any kernel in that step; then LAYERNORM and SOFTMAX calls split into their PopLibs vertices
(compiler/costs/vector.py recipes) with the part a worker-perfect split would remove.
From the expanded tile graph alone, like steps.py (expand's cycles are the simulator's).

    python experiments/comm/vector.py [key=value ...] [/ key=value ... / ...]

Output: per step `op  step cycles  critical-tile vector cycles  tiles busy/idle` and its
kernel groups `KIND x calls (rows x cols | elements) = cycles`; a per-op total line."""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler import isa  # noqa: E402
from compiler.costs import vector as vec, vertices as vt  # noqa: E402
from compiler.expand.analysis import kernel_cycles  # noqa: E402
from experiments.comm.steps import expanded  # noqa: E402


def _shape(op: int, i0: int, i1: int, flags: int = 0) -> str:
    if op == isa.LAYERNORM and flags:                  # policy.ln_halves' two kernels
        return f"{i0}x{i1} {'stats' if flags == isa.F_LN_STATS else 'half'}"
    if op == isa.SOFTMAX and flags & isa.F_SM_DEFER:   # policy.deferred_norm
        return f"{i0}x{i1} deferred"
    if op in (isa.LAYERNORM, isa.SOFTMAX, isa.BIAS, isa.ONLINE_SOFTMAX, isa.ROWSCALE):
        return f"{i0}x{i1}"
    if op == isa.ADD:
        return f"{i0 + 1} src x {i1}"
    return f"{i0}"


def row_terms(kind: str, rows: int, cols: int, W: int, V: int, scaled: bool = False, part: str = "") -> dict:
    """The vertices of one LAYERNORM / SOFTMAX call (the recipes of compiler/costs/vector.py,
    term by term, so the table names which vertex costs what); `part`: a row half's stats or
    half kernel (policy.ln_halves)."""
    P = vt.PERF
    byrow = lambda o: int(vec.by_row_cycles(rows, cols, o, W, V))
    red = int(vt.reduce_rows_cycles(rows, cols, W, V))
    if kind == "LAYERNORM" and part == "stats":
        return {"2 row reductions": 2 * red}
    if kind == "LAYERNORM":
        if part == "half":
            red = 0
        return {"2 row reductions": 2 * red,
                "halves' sums added (f32 ADD)": int(part == "half") * int(vec._b1(2 * rows, "ADD", "f32", W, V)),
                "var (f32 MUL+SUB)": int(vec._b1(rows, "MULTIPLY", "f32", W, V) + vec._b1(rows, "SUBTRACT", "f32", W, V)),
                "invstd": int(vt.broadcast_scalar_1d_cycles(rows, P[("VARIANCE_TO_INV_STD_DEV", "f32")], 4, W, V)),
                "2 casts f32->f16": 2 * int(vec.row_value_to_half_cycles(rows, W, V)),
                "x-mean, *invstd": byrow("SUBTRACT") + byrow("MULTIPLY"),
                "gamma, beta": int(vec.by_col_cycles(rows, cols, "MULTIPLY", W, V) + vec.by_col_cycles(rows, cols, "ADD", W, V))}
    n = rows * cols
    norm = part != "deferred"                          # deferred: no 1/sum, no by-row multiply
    return {"scale": int(scaled) * int(vt.broadcast_scalar_1d_cycles(n, P[("MULTIPLY", "f16")], 2, W, V)),
            "2 row reductions": 2 * red, "x-max, *1/sum": byrow("SUBTRACT") + norm * byrow("MULTIPLY"),
            "exp": int(vt.unary_op_1d_cycles(n, P[("EXPONENT", "f16")], 2, W, V, True)),
            "1/sum": norm * int(vt.unary_op_1d_cycles(rows, P[("INVERSE", "f16")], 2, W, V, False))}


def report(g, e, t) -> dict:
    f = e.finalists[0]
    tg = f.tilegraph
    b0, b1 = tg.body_steps()
    k, kc, T = tg.kern, kernel_cycles(tg, t), tg.tiles
    W, V = t.workers, t.vector_bytes_per_cycle
    per_op = defaultdict(int)
    print(f"  body {int(f.analysis['body_cycles'])}  {f.candidate.label}")
    for s in range(b0, b1):
        if tg.steps[s] != "compute":
            continue
        sel = k["step"] == s + 1
        busy = np.bincount(k["tile"][sel], kc[sel], minlength=T)
        w = int(busy.argmax())
        on = sel & (k["tile"] == w) & (k["op"] != isa.MATMUL) & (k["op"] != isa.COPY)
        name = g.ops[tg.step_op[s]].outputs[0]
        vcyc = int(kc[on].sum())
        per_op[name] += vcyc
        if not vcyc:
            continue
        print(f"  c{s:3d} {name:10s} step {int(busy.max()):6d}  vector {vcyc:6d}  tiles busy {int((busy > 0).sum())} "
              f"idle {int((busy == 0).sum())}")
        groups = defaultdict(lambda: [0, 0])
        for j in np.flatnonzero(on):
            key = (int(k["op"][j]), _shape(int(k["op"][j]), int(k["i0"][j]), int(k["i1"][j]), int(k["dtype"][j] >> 16)))
            groups[key][0] += 1
            groups[key][1] += int(kc[j])
        for (op, shp), (n, c) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            line = f"      {isa.OP_NAMES[op]:9s} x{n:3d} ({shp}) = {c}"
            if op in (isa.LAYERNORM, isa.SOFTMAX):
                dims, _, part = shp.partition(" ")
                r, cols = map(int, dims.split("x"))
                terms = row_terms(isa.OP_NAMES[op], r, cols, W, V, part=part)
                line += "   " + ", ".join(f"{a} {b}" for a, b in terms.items() if b)
            print(line)
    print("  vector per op (critical tiles):", ", ".join(f"{n} {c}" for n, c in per_op.items() if c),
          " total", sum(per_op.values()))
    return dict(per_op)


def main(argv):
    return {label: report(g, e, t) for label, g, e, t in expanded(argv)}


if __name__ == "__main__":
    main(sys.argv[1:])
