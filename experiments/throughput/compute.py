"""Where one layer's compute time goes (issue #27): per graph op, the compute supersteps'
cycles against the AMP floor of the op's MACs, and the cost terms that make the gap.

    python experiments/throughput/run.py --expand --compute B [f16|fp8] [key=value ...]

After each row's model, plan and expand phases (run.py's config: 27 layers, ipu21, batch B),
run.py --compute prints this table and writes it to compute-<act>-b<B>[-<overrides>].md here. It
reads the best candidate's tile graph and expand's own per-step figures
(`analysis["step_cycles"]`, `analysis["tile_cycles"]`). The cycles are the compiler's: kernel
cycles from compiler/expand/analysis.kernel_cycles (what expand and the simulator charge), the
matmul terms from compiler/costs/amp.py's own term functions, recombined; nothing here
re-estimates a kernel. The script checks that the terms sum to kernel_cycles' figure for every
MATMUL it splits, and that the ops' rows sum to the body's compute steps.

A compute superstep lasts as long as its busiest tile (analysis.step_cycles); one layer's
compute time is the sum over the Repeat body's compute steps of that tile's kernels (+ the
sync each step pays). Each kernel is charged to the graph op whose output it writes
(compiler/report/ops.op_of_names: "fc1.xw.p" is fc1.xw's partials). Per op, per image:

  floor        the op's MACs (graph attrs m·k·n, per group) / (amp_macs_per_cycle of its
               AMP dtype × tiles): every tile's AMP busy on real MACs, nothing else
  tile spread  the busiest tiles' real MACs / rate − floor: those tiles hold more than
               1/tiles of the op's MACs (tiles idle or holding smaller blocks)
  ragged       the AMP's padded channel groups (k to amp_in_group, n to amp_out_group)
  workers      worker imbalance: 6 × the slowest worker's rows against m (amp_worker_rows)
  per pass     the worker loop's start-up / zeroing constants and the supervisor's
               per-pass loop overheads (amp_worker_cycles_*, amp_supervisor_*)
  loads        weight loads, every pass (amp_weight_load_cycles)
  per call     the supervisor's fixed per-vertex cost (amp_supervisor_* at one pass)
  cast         the f32 -> f16 output cast (amp_output_cast_cycles; f16 products only, none for
               f32 partials, policy.f32_partials)
  partials     the k-split's partial-sum ADD kernels (writing the op's output)
  vector       every other kernel of the op on those tiles (bias, GELU, LayerNorm, ...)
"""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler import isa  # noqa: E402
from compiler.costs import DTYPE_BYTES, amp  # noqa: E402
from compiler.expand.analysis import kernel_cycles  # noqa: E402
from compiler.phases import target_of  # noqa: E402
from compiler.pod.split import _macs  # noqa: E402
from compiler.report.ops import op_of_names  # noqa: E402
from compiler.schedule import out_request  # noqa: E402

TERMS = ("spread", "ragged", "workers", "per_pass", "loads", "per_call", "cast", "partials", "vector")


def matmul_terms(t, m, k, n, d: str, f32_out: bool = False) -> dict:
    """amp.matmul_cycles(t, m, k, n, d) split into its terms (arrays over kernels), by the same
    term functions amp.matmul_cycles combines; f32_out (isa.F_F32_OUT, policy.f32_partials):
    a k-split's f32 partials, no cast."""
    W, gi, go = t.workers, t.amp_in_group[d], t.amp_out_group[d]
    core = gi * go // t.amp_macs_per_cycle[d]
    IG, OG = -(-k // gi), -(-n // go)
    P = IG * OG
    rows = amp.amp_worker_rows(m, W)
    loads = amp.amp_weight_load_cycles(go, gi, DTYPE_BYTES[d], t.amp_weight_load_bytes_per_cycle)
    if d == "fp8":
        wz, wnz = (amp.amp_worker_cycles_quarter(rows, z, core) for z in (True, False))
        call = amp.amp_supervisor_quarter(1, 1, 0, 0, 0, W)
        cast = np.zeros_like(m)
    else:
        fa = d == "f32"
        wz, wnz = (amp.amp_worker_cycles_half_float(rows, z, fa, go, core) for z in (True, False))
        call = amp.amp_supervisor_half_float(1, 1, 0, 0, 0, W, fa)
        cast = amp.amp_output_cast_cycles(m, n, W, t.vector_bytes_per_cycle) * (not f32_out)
    passes = OG * amp.amp_pass_cycles(wz, W) + (IG - 1) * OG * amp.amp_pass_cycles(wnz, W)
    total = amp.matmul_cycles(t, m, k, n, d, f32_out)
    slow = rows.max(-1)
    real = m * k * n / t.amp_macs_per_cycle[d]
    supervisor = total - passes - P * loads - cast          # amp_supervisor_*: its loops and fixed part
    out = dict(real=real, ragged=P * core * m - real, workers=P * core * (W * slow - m),
               per_pass=passes - P * W * core * slow + supervisor - call, loads=P * loads, per_call=call, cast=cast)
    assert np.allclose(sum(out.values()), total), "matmul terms do not sum to amp.matmul_cycles"
    return out


def breakdown(res: dict, cfg: dict, b: int) -> tuple[list, dict]:
    """Per op rows (per image, one layer) and totals, from the model and expand phases' results."""
    t, g, e = target_of(cfg), res["model"].graph, res["expand"]
    best = e.finalists[0]
    tg, an = best.tilegraph, best.analysis
    k = tg.kern
    kc = kernel_cycles(tg, t)
    kop = op_of_names(g, [tg.names[i] for i in tg.req["name"][out_request(k)]])
    b0, b1 = tg.body_steps()
    rows = defaultdict(lambda: defaultdict(float))
    shapes = defaultdict(Counter)                # op -> its MATMUL calls' m x k x n on those tiles
    sync = 0
    compute_busy = 0
    for j in range(b0, b1):
        if tg.steps[j] != "compute":
            continue
        sync += t.sync_cycles
        tc = an["tile_cycles"][j]
        tile = int(np.argmax(tc))
        compute_busy += int(tc[tile])
        assert int(an["step_cycles"][j]) == int(tc[tile]) + t.sync_cycles
        sel = np.flatnonzero((k["step"] == j + 1) & (k["tile"] == tile))
        for i in sel:
            r = rows[int(kop[i])]
            r["cycles"] += kc[i]
            if k["op"][i] == isa.MATMUL:
                names = (isa.DTYPE_NAMES[k["dtype"][i] & 0xFF], isa.DTYPE_NAMES.get((k["dtype"][i] >> 8) & 0xFF))
                d = t.amp_dtype(*names)
                shapes[int(kop[i])][(int(k["i0"][i]), int(k["i1"][i]), int(k["i2"][i]))] += 1
                parts = matmul_terms(t, np.int64(k["i0"][i]), np.int64(k["i1"][i]), np.int64(k["i2"][i]), d,
                                     bool((k["dtype"][i] >> 16) & isa.F_F32_OUT))
                assert np.isclose(sum(parts.values()), kc[i])
                for key, v in parts.items():
                    r[key] += float(v)
            elif k["op"][i] == isa.ADD and g.ops[kop[i]].kind == "matmul":
                r["partials"] += kc[i]
            else:
                r["vector"] += kc[i]
    assert sum(r["cycles"] for r in rows.values()) == compute_busy
    out = []
    for i, op in enumerate(g.ops):
        if i not in rows:
            continue
        r = rows[i]
        macs = _macs(op)
        dts = [g.tensors[x].dtype for x in op.inputs[:2]]
        rate = t.amp_macs_per_cycle[t.amp_dtype(dts[1], dts[0])] if macs else 1
        floor = macs / (rate * t.tiles)
        r["spread"] = r.pop("real", 0.0) - floor
        call = "x".join(map(str, shapes[i].most_common(1)[0][0])) if shapes[i] else "-"
        out.append(dict(name=op.outputs[0], kind=op.kind, call=call, calls=sum(shapes[i].values()),
                        macs=macs / b, floor=floor / b, cycles=r["cycles"] / b, **{x: r.get(x, 0.0) / b for x in TERMS}))
    return out, dict(sync=sync / b, busy=compute_busy / b, clock=t.clock_hz, layers=g.repeat.count if g.repeat else 1)


def fmt(x: float) -> str:
    return f"{x:,.0f}"


def table(rows: list, info: dict) -> str:
    head = ("| op | kind | MATMUL m×k×n (calls a layer) | MACs / image | AMP floor | compute cycles | × floor | "
            + " | ".join(TERMS) + " |\n|---|---|---|---:|---:|---:|---:|" + "---:|" * len(TERMS))
    lines = [head]
    for r in rows:
        ratio = f"{r['cycles'] / r['floor']:.2f}" if r["floor"] else "-"
        calls = f"{r['call']} ({r['calls']:g})" if r["calls"] else "-"
        lines.append(f"| {r['name']} | {r['kind']} | {calls} | {fmt(r['macs'])} | {fmt(r['floor'])} | {fmt(r['cycles'])} | "
                     f"{ratio} | " + " | ".join(fmt(r[x]) for x in TERMS) + " |")
    tot = {x: sum(r[x] for r in rows) for x in ("macs", "floor", "cycles", *TERMS)}
    lines.append(f"| **layer** | | | {fmt(tot['macs'])} | {fmt(tot['floor'])} | {fmt(tot['cycles'])} | "
                 f"{tot['cycles'] / tot['floor']:.2f} | " + " | ".join(fmt(tot[x]) for x in TERMS) + " |")
    L, clk = info["layers"], info["clock"]
    lines.append("")
    lines.append(f"Per image, one layer: compute kernels {fmt(info['busy'])} + sync {fmt(info['sync'])} cycles "
                 f"(compute steps {fmt(info['busy'] + info['sync'])}); {L} layers of them alone: "
                 f"{clk / (L * (info['busy'] + info['sync'])):.1f} images/s; of the matmul floor alone: "
                 f"{clk / (L * tot['floor']):.1f} images/s.")
    return "\n".join(lines)


def write(res: dict, cfg: dict, b: int, act: str, cmd: str, extra: list) -> str:
    """The table, also written beside this script as compute-<act>-b<B>[-<overrides>].md."""
    text = f"<!-- {cmd} -->\n" + table(*breakdown(res, cfg, b)) + "\n"
    tag = "".join("-" + x.split(".")[-1].replace("=", "_") for x in extra)
    (Path(__file__).resolve().parent / f"compute-{act}-b{b}{tag}.md").write_text(text)
    return text
