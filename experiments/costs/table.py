"""Every distinct kernel (kind, shape, dtype) of a trial's lowered program, with its cycles
under the current cost model, under the one before the row-value casts and ROWSCALE's
reciprocal (1bf6f91, `before`) and under the per-byte one #25 replaced (main at 8ff4b7d,
`previous`), and the trial's totals from the independent oracle (= the simulator's,
tests/sim/test_oracle.py).

    python experiments/costs/table.py NAME [overrides ...] > experiments/costs/NAME.md
    python experiments/costs/table.py default
    python experiments/costs/table.py layers27 model.layers=27

Compiles model -> plan -> expand -> place -> schedule -> lower (no reference, no
simulation: the oracle prices the program). `previous` transcribes the cost model this
change replaced: MATMUL = 50 + k groups x n groups x (weight load + m x in x out / rate),
f32 at 16 MACs/cycle; ADD = 40 + its bytes read and written at 8 B/cycle; BIAS = 40 + (4 rows
x cols + 2 cols) B at 8 B/cycle; GELU, SOFTMAX, ONLINE_SOFTMAX, LAYERNORM, ROWSCALE, CAST = 40 +
their bytes at 8 B/cycle + their exp/erf/rsqrt at 2 a cycle (previous_vector); COPY unchanged.
`before` is now less the terms 1bf6f91 did not charge (before_vector)."""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler import isa  # noqa: E402
from compiler.costs import vector, vertices  # noqa: E402
from compiler.phases import run_phase  # noqa: E402
from compiler.sim import oracle  # noqa: E402
from compiler.target import Target  # noqa: E402
from pipeline.config import compose  # noqa: E402

SHAPE_WORDS = {isa.MATMUL: (4, 5, 6), isa.ADD: (4, 5), isa.COPY: (3, 4), isa.GELU: (3,),
               isa.LAYERNORM: (5, 6), isa.SOFTMAX: (3, 4), isa.CAST: (3,), isa.ONLINE_SOFTMAX: (4, 5),
               isa.ROWSCALE: (5, 6), isa.BIAS: (4, 5)}
SHAPE_NAMES = {isa.MATMUL: "m,k,n", isa.ADD: "nsrc1,nelem", isa.COPY: "row_bytes,rows", isa.GELU: "nelem",
               isa.LAYERNORM: "rows,cols", isa.SOFTMAX: "rows,cols", isa.CAST: "nelem",
               isa.ONLINE_SOFTMAX: "rows,cols", isa.ROWSCALE: "rows,cols", isa.BIAS: "rows,cols"}


def previous_matmul(m, k, n, d, f) -> int:
    """The MATMUL cost at 8ff4b7d (target.py matmul_cycles then), f32 at its 16 MACs/cycle."""
    rate = {"f16": 64, "fp8": 128, "f32": 16}[d]
    gi, go = f["amp_in_group"][d], f["amp_out_group"][d]
    load = -(-(gi * go * {"f16": 2, "fp8": 1, "f32": 4}[d]) // f["amp_weight_load_bytes_per_cycle"])
    return 50 + -(-k // gi) * -(-n // go) * (load + -(-(m * gi * go) // rate))


def previous_add(nsrc1, nelem) -> int:
    """The ADD cost at 8ff4b7d: kernel overhead 40 + (2 + nsrc1) x 2 B per element at 8 B/cycle."""
    return 40 + -(-(2 * nelem * (nsrc1 + 2)) // 8)


def _up(a, b):
    return -(-a // b)


def previous_vector(op, w, flags) -> int:
    """The per-byte model at 8ff4b7d for GELU, SOFTMAX, ONLINE_SOFTMAX, LAYERNORM, ROWSCALE, CAST."""
    if op == isa.GELU:
        return 40 + _up(4 * w[3], 8) + _up(w[3], 2)
    if op == isa.CAST:
        return 40 + _up(w[3] * 3, 8)
    r, c = {isa.SOFTMAX: (w[3], w[4]), isa.ONLINE_SOFTMAX: (w[4], w[5]), isa.LAYERNORM: (w[5], w[6]),
            isa.ROWSCALE: (w[5], w[6])}[op]
    if op == isa.LAYERNORM:
        return 40 + _up(10 * r * c, 8) + _up(r, 2)
    if op == isa.ROWSCALE:
        return 40 + _up(r * c * (4 + 2 * bool(flags & isa.F_ADD)) + 4 * r, 8)
    soft = 40 + _up(6 * r * c, 8) + _up(r * c, 2)
    return soft if op == isa.SOFTMAX else soft + _up(r, 2) + _up(12 * r, 8)


def before_vector(op, r, flags, now) -> int:
    """The cost at 1bf6f91: now less the f32 row values' casts to half (ROWSCALE's vector, the
    online max, LayerNorm's mean and invStdDev) and ROWSCALE's reciprocal, which it did not charge."""
    W, V = 6, 8
    cast = int(vector.row_value_to_half_cycles(r, W, V))
    if op == isa.ROWSCALE:
        inv = int(vertices.unary_op_1d_cycles(r, vertices.PERF[("INVERSE", "f32")], 4, W, V, False))
        return now - cast - (inv if flags & isa.F_RECIP else 0)
    return now - {isa.ONLINE_SOFTMAX: 1, isa.LAYERNORM: 2}.get(op, 0) * cast


def compile_program(overrides: list[str]):
    cfg = compose(overrides)
    res = {}
    for name in ("model", "plan", "expand", "place", "schedule", "lower"):
        res[name] = run_phase(name, res, cfg)
        if getattr(res[name], "rejection", None) is not None:
            raise SystemExit(f"rejected at {name}: {res[name].rejection}")
    return cfg, res


def kinds(prog, count: int, body: tuple[int, int]):
    """(op, dtype b, dtype a, shape) -> executed instances (a Repeat body's x count)."""
    o = oracle.Oracle(prog)
    kern = ~np.isin(o.op, (isa.END, isa.SYNC, isa.EXCH, isa.REPEAT))
    rep = np.flatnonzero(o.op == isa.REPEAT)
    in_body = np.zeros(len(o.op), bool)
    for r in rep:
        in_body[r + 1:r + 1 + int(o.words[r, 2])] = True
    c = Counter()
    for i in np.flatnonzero(kern):
        op, w = int(o.op[i]), o.words[i]
        flags = int(w[0] >> 24 & 0xFF) & (isa.F_ADD | isa.F_RECIP if op == isa.ROWSCALE else 0)   # cost flags
        key = (op, int(w[0] >> 8 & 0xFF), int(w[0] >> 16 & 0xFF) | flags << 8, tuple(int(w[j]) for j in SHAPE_WORDS[op]))
        c[key] += count if in_body[i] else 1
    return o, c


def main(name: str, overrides: list[str]):
    cfg, res = compile_program(overrides)
    prog = res["lower"].program
    t = Target.from_dict(dict(prog.target))
    f = dict(prog.target)
    g = res["model"].graph
    count = g.repeat.count if getattr(g, "repeat", None) else 1
    o, c = kinds(prog, count, res["lower"].body)
    steps = o.step_cycles()
    b0, b1 = res["lower"].body
    last = b0 + (count - 1) * (b1 - b0)
    per_layer = int(steps[last:last + b1 - b0].sum())
    assert t.workers == 6 and t.vector_bytes_per_cycle == 8     # before_vector's figures
    rows, tot_now, tot_prev, tot_before = [], Counter(), Counter(), Counter()
    for (op, d, d2f, shape), n in sorted(c.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0])):
        d2, flags = d2f & 0xFF, d2f >> 8
        w = np.zeros((1, isa.INSTR_WORDS), np.int64)
        w[0, 0] = op | d << 8 | d2 << 16 | flags << 24
        for j, v in zip(SHAPE_WORDS[op], shape):
            w[0, j] = v
        now = int(oracle.kernel_cycles(np.array([op]), w, oracle._Figures(f))[0])
        kind = isa.OP_NAMES[op] + ("+recip" if flags & isa.F_RECIP else "") + ("+add" if flags & isa.F_ADD else "")
        dt = isa.DTYPE_NAMES.get(d, "-") + ("" if not d2 or d2 == d else "x" + isa.DTYPE_NAMES[d2])
        prev = now
        if op == isa.MATMUL:
            da = isa.DTYPE_NAMES[d2] if d2 else None
            assert now == int(t.matmul_cycles(*shape, isa.DTYPE_NAMES[d], da))   # target.py = oracle
            prev = previous_matmul(*shape, t.amp_dtype(isa.DTYPE_NAMES[d], da), f)
        if op == isa.ADD:
            prev = previous_add(*shape)
        if op == isa.BIAS:
            prev = 40 + -(-(4 * shape[0] * shape[1] + 2 * shape[1]) // 8)
        if op in (isa.GELU, isa.SOFTMAX, isa.ONLINE_SOFTMAX, isa.LAYERNORM, isa.ROWSCALE, isa.CAST):
            prev = previous_vector(op, w[0], flags & isa.F_ADD)
        before = now
        if op in (isa.ONLINE_SOFTMAX, isa.LAYERNORM, isa.ROWSCALE):
            before = before_vector(op, shape[0], flags, now)
        tot_now[kind] += n * now
        tot_prev[kind] += n * prev
        tot_before[kind] += n * before
        rows.append((kind, dt, SHAPE_NAMES[op], shape, n, prev, before, now))
    print(f"# {name}: every distinct kernel of the lowered program ({' '.join(overrides) or 'default trial'})\n")
    print(f"cycles (oracle = simulator): **{int(steps.sum()):,}**, per layer **{per_layer:,}** "
          f"({len(steps)} supersteps)\n")
    print("| kind | dtype | shape | = | executed | previous cycles | before | cycles | × previous | × before |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for kind, dt, sn, shape, n, prev, before, now in rows:
        print(f"| {kind} | {dt} | {sn} | {','.join(map(str, shape))} | {n:,} | {prev:,} | {before:,} | {now:,} "
              f"| {now / prev:.2f} | {now / before:.3f} |")
    print("\nKernel cycles summed over every executed instance (all tiles; not the critical path):\n")
    print("| kind | previous | before | now | × previous | × before |")
    print("|---|---:|---:|---:|---:|---:|")
    for k in tot_now:
        print(f"| {k} | {tot_prev[k]:,} | {tot_before[k]:,} | {tot_now[k]:,} | {tot_now[k] / max(tot_prev[k], 1):.3f} "
              f"| {tot_now[k] / max(tot_before[k], 1):.3f} |")
    json.dump({"cycles": int(steps.sum()), "cycles_per_layer": per_layer},
              open(Path(__file__).parent / f"{name}.json", "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
