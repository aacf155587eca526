"""Where a matmul's AMP cycles go above its compute floor (issue #26), from the expanded
tile graph: for each matmul of the Repeat body, the MATMUL kernels of its busiest tile
(the tile whose kernels of that compute step take longest, as steps.py reads it),
their PopLibs estimate (compiler/costs/amp.py, the figure expand and the simulator
charge) cut into terms that add up to it exactly:

  floor     the op's multiply-accumulates / (AMP MACs a cycle x every tile): the
            bound of experiments/roofline (there with 729 tokens, here the graph's m)
  grid      the busiest tile's useful MACs above its even share: tiles the grid leaves
            idle, blocks rounded up (ceil(M / gm) rows, ...), a k-split's partials
  k pad     k rounded up to whole in-channel groups (amp_in_group: 16 f16, 32 FP8)
  n pad     n rounded up to whole out-channel groups (amp_out_group: 16)
  ragged    the 6 workers' row split: every pass lasts as long as the worker with
            ceil(m / 6) rows
  overhead  per pass (worker start-up and tag cost, supervisor in/out-group loops,
            weight loads) and per call (the supervisor's non-loop cycles)
  cast      f32 partials -> f16 output (none for FP8 x FP8 or F_F32_OUT)

Nothing here prices a plan: the terms re-read the same functions of
compiler/costs/amp.py on the kernels expand issued, so the table explains expand's
figure rather than re-deriving it. Run through steps.py -a, e.g.

    python experiments/comm/steps.py model.layers=27 -a

and, run as a script, the best candidate against itself with named matmuls on other
grids (what the frontier's off-frontier grids cost exactly, exchange included):

    python experiments/comm/amp.py model.layers=27 attn=16x3x5x6 scores=16x2x46x1
"""
from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler import isa  # noqa: E402
from compiler.costs import amp as ampc  # noqa: E402
from compiler.plan import PlanResult  # noqa: E402
from compiler.plan.options import GRID_FIELDS  # noqa: E402
from compiler.plan.homes import panel_elems  # noqa: E402
from compiler.plan.matmul import OUT_BYTES, Grid, enumerate_grids, reduce_rows  # noqa: E402
from compiler.target import DTYPE_BYTES  # noqa: E402

TERMS = ("floor", "grid", "k pad", "n pad", "ragged", "overhead", "cast")


def kernel_terms(t, m, k, n, dtype: str, f32_out) -> dict:
    """The terms (arrays over kernels, TERMS but floor and grid, plus 'useful', 'passes'
    and 'total') of MATMULs m x k x n whose AMP runs as `dtype`. useful + k pad + n pad +
    ragged + overhead + cast == total == t's matmul estimate."""
    m, k, n = (np.asarray(x, np.int64) for x in (m, k, n))
    W, gi, go, macs = t.workers, t.amp_in_group[dtype], t.amp_out_group[dtype], t.amp_macs_per_cycle[dtype]
    kp, np_ = -(-k // gi) * gi, -(-n // go) * go
    passes = (kp // gi) * (np_ // go)
    core = gi * go // macs                              # cycles a row a pass (the worker's core loop)
    rows = passes * core * W * -(-m // W)               # every pass at the slowest worker's rows
    total = ampc.matmul_cycles(t, m, k, n, dtype, f32_out)
    no_cast = (dtype == "fp8") | np.asarray(f32_out, bool)
    cast = np.where(no_cast, 0, ampc.amp_output_cast_cycles(m, n, W, t.vector_bytes_per_cycle))
    return {"useful": m * k * n / macs, "k pad": m * (kp - k) * n / macs, "n pad": m * kp * (np_ - n) / macs,
            "ragged": rows - m * kp * np_ / macs, "overhead": total - cast - rows, "cast": cast,
            "passes": passes, "total": total}


def _amp_dtype(t, code):
    """The AMP dtype of MATMUL kernels from their dtype words (b, and a when it differs)."""
    b, a = code & 0xFF, (code >> 8) & 0xFF
    return np.array([t.amp_dtype(isa.DTYPE_NAMES[int(x)], isa.DTYPE_NAMES[int(y or x)]) for x, y in zip(b, a)])


def op_gaps(g, tg, t, kc) -> list[dict]:
    """One row per matmul of the Repeat body: its busiest tile's MATMUL terms summed over
    that op's compute steps (kc: every kernel's cycles, expand/analysis.kernel_cycles)."""
    k = tg.kern
    b0, b1 = tg.body_steps()
    rows = {}
    for s in range(b0, b1):
        op = tg.step_op[s]
        if tg.steps[s] != "compute" or op < 0 or g.ops[op].kind != "matmul":
            continue
        sel = k["step"] == s + 1
        mm = sel & (k["op"] == isa.MATMUL)
        if not mm.any():
            continue                                    # the op's reduction step (ADD)
        busy = np.bincount(k["tile"][sel], kc[sel], minlength=tg.tiles)
        amp = np.bincount(k["tile"][mm], kc[mm], minlength=tg.tiles)
        w = busy.argmax()
        on = np.flatnonzero(mm & (k["tile"] == w))
        dts = _amp_dtype(t, k["dtype"][on])
        f32o = ((k["dtype"][on] >> 16) & isa.F_F32_OUT) != 0
        r = rows.setdefault(op, {"op": g.ops[op].outputs[0], "calls": 0, "passes": 0, "amp": 0,
                                 "blocks": [], **{x: 0.0 for x in TERMS[1:]}, "useful": 0.0})
        step = 0
        for d in np.unique(dts):
            i = on[dts == d]
            tr = kernel_terms(t, k["i0"][i], k["i1"][i], k["i2"][i], str(d), f32o[dts == d])
            for x in ("k pad", "n pad", "ragged", "overhead", "cast", "useful", "passes"):
                r[x] += float(np.sum(tr[x]))
            step += int(np.sum(tr["total"]))
            r["dtype"] = str(d)
        assert step == int(kc[on].sum()), "the terms' total is not expand's cycles"
        r["amp"] += step
        r["calls"] += len(on)
        r["blocks"] += sorted({(int(k["i0"][i]), int(k["i1"][i]), int(k["i2"][i])) for i in on})
        r["tiles"] = int((amp > 0).sum())
        r["at_max"] = int((amp == amp.max()).sum())
    out = []
    for op, r in rows.items():
        o = g.ops[op]
        G = len(o.attr("groups", ((0,) * 6,)))
        macs = G * o.attr("m") * o.attr("k") * o.attr("n")
        r["floor"] = macs / (t.amp_macs_per_cycle[r["dtype"]] * t.tiles)
        r["grid"] = r.pop("useful") - r["floor"]
        assert abs(sum(r[x] for x in TERMS) - r["amp"]) < 1e-6 * r["amp"] + 1e-3
        out.append(r)
    return out


def print_gaps(rows: list[dict]) -> None:
    """A markdown table: per op, AMP on the busiest tile, its floor and the terms."""
    print("| op | block m×k×n (calls) | tiles (at max) | AMP | floor | × | " + " | ".join(TERMS[1:])
          + " | passes |")
    print("|---|---|---:|---:|---:|---:|" + "---:|" * (len(TERMS) - 1) + "---:|")
    tot = {x: 0.0 for x in ("amp", *TERMS)}
    for r in rows:
        blk = ", ".join(f"{m}×{k}×{n}" for m, k, n in dict.fromkeys(r["blocks"]))
        print(f"| {r['op']} | {blk} ({r['calls']}) | {r['tiles']} ({r['at_max']}) | {r['amp']:,} | "
              f"{r['floor']:,.0f} | {r['amp'] / r['floor']:.2f} | "
              + " | ".join(f"{r[x]:,.0f}" for x in TERMS[1:]) + f" | {int(r['passes'])} |")
        for x in tot:
            tot[x] += r[x]
    print(f"| all | | | {tot['amp']:,.0f} | {tot['floor']:,.0f} | {tot['amp'] / tot['floor']:.2f} | "
          + " | ".join(f"{tot[x]:,.0f}" for x in TERMS[1:]) + " | |")


def plain_grids(g, t, o) -> tuple[dict, np.ndarray, np.ndarray]:
    """Matmul op o's plain one-pass grids as plan/matmul.py enumerates them (feasible only),
    their labels GGxGMxGNxGK and their busiest tile's AMP (gb calls of the estimate)."""
    A, B = (g.tensors[x] for x in o.inputs)
    e = enumerate_grids(len(o.attr("groups", ((0,) * 6,))), o.attr("m"), o.attr("k"), o.attr("n"), A.dtype,
                        B.dtype, bool(o.attr("transpose_b", False)), t, panel=panel_elems(t, B.dtype))
    ok = np.flatnonzero(e["reason"] == "")
    e = {f: v[ok] for f, v in e.items() if isinstance(v, np.ndarray)}
    lab = np.array([f"{a}x{b}x{c}x{d}" for a, b, c, d in zip(e["gg"], e["gm"], e["gn"], e["gk"])])
    return e, lab, e["gb"] * t.matmul_cycles(e["mb"], e["kb"], e["nb"], B.dtype, A.dtype)


def received(e: dict, n: int, ea: int, eb: int):
    """Bytes a grid's busiest tile receives: its A and B blocks and, with a k-split, the
    f16 partials it reduces (plan/matmul.py reduce_rows). e: grid fields (arrays or ints)."""
    gk, mb, kb, nb, gb = (np.asarray(e[f]) for f in ("gk", "mb", "kb", "nb", "gb"))
    return gb * (mb * kb * ea + kb * nb * eb + (gk - 1) * reduce_rows(mb, gk, nb, n) * nb * OUT_BYTES)


def frontier(g, t, rows: list[dict]) -> list[dict]:
    """Per matmul: its plain grids' busiest-tile AMP against the bytes that tile receives
    (`received`: the exchange an AMP saving has to be bought with; a ring or resident B
    receives less, so this overstates B for those; the reduction's ADD left out): the
    chosen grid's (from `rows`), the least AMP of any grid receiving no more, and the least
    AMP at all, each as (label, AMP, bytes)."""
    out = []
    by_name = {r["op"]: r for r in rows}
    for o in g.ops:
        r = by_name.get(o.outputs[0])
        if r is None:
            continue
        ea, eb = (DTYPE_BYTES[g.tensors[x].dtype] for x in o.inputs)
        e, lab, amp = plain_grids(g, t, o)
        recv = received(e, o.attr("n"), ea, eb)
        m, k, n = r["blocks"][0]
        own = int(received(dict(gk=-(-o.attr("k") // k), mb=m, kb=k, nb=n, gb=r["calls"]), o.attr("n"), ea, eb))
        le = recv <= own
        i, j = np.flatnonzero(le)[np.argmin(amp[le])], int(np.argmin(amp))
        out.append({"op": r["op"], "amp": r["amp"], "recv": own,
                    **{key: (lab[x], int(amp[x]), int(recv[x])) for key, x in (("same_recv", i), ("least", j))}})
    return out


def print_frontier(fr: list[dict]) -> None:
    print("| op | chosen: AMP (bytes received) | least AMP receiving no more: grid, AMP (bytes) "
          "| least AMP: grid, AMP (bytes) |")
    print("|---|---|---|---|")
    for f in fr:
        a, b = f["same_recv"], f["least"]
        print(f"| {f['op']} | {f['amp']:,} ({f['recv']:,}) | {a[0]}: {a[1]:,} ({a[2]:,}) "
              f"| {b[0]}: {b[1]:,} ({b[2]:,}) |")


def swapped(plan, g, t, swaps: dict):
    """The plan's best candidate with each matmul named in `swaps` (output name -> grid
    label GGxGMxGNxGK, plain, one pass) on that grid instead, as a PlanResult of that one
    candidate for expand: what an off-frontier grid costs exactly, exchange included."""
    best = plan.candidates[0]
    strat = []
    for n, grid in best.strategy:
        want = swaps.get(g.ops[n].outputs[0])
        if want:
            e, lab, _ = plain_grids(g, t, g.ops[n])
            i = np.flatnonzero(lab == want)
            if not len(i):
                raise SystemExit(f"{g.ops[n].outputs[0]}: no feasible plain grid {want}")
            i = i[np.argmin(e["cycles"][i])]
            grid = Grid(*(int(e[f][i]) for f in GRID_FIELDS))
        strat.append((n, grid))
    return PlanResult(candidates=[replace(best, strategy=tuple(strat))])


def main(argv):
    """amp.py OVERRIDES... [op=GRID ...]: the plan's best candidate alone and the same with
    the named matmuls' grids swapped, each expanded; exact body cycles and per-op exchange,
    compute and AMP terms of both."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import steps
    from compiler.phases import run_phase, target_of
    from pipeline.config import compose
    is_swap = lambda a: re.fullmatch(r"[^=]+=\d+x\d+x\d+x\d+", a)    # op=GGxGMxGNxGK; the rest: overrides
    swaps = dict(a.split("=", 1) for a in argv if is_swap(a))
    cfg = compose(["model=vit", "target=ipu21", *(a for a in argv if not is_swap(a))])
    t = target_of(cfg)
    r = {"model": run_phase("model", {}, cfg)}
    g = r["model"].graph
    plan = run_phase("plan", r, cfg)
    out = {}
    for name, p in (("best", swapped(plan, g, t, {})), ("swapped", swapped(plan, g, t, swaps))):
        print(name, " ".join(f"{k}={v}" for k, v in swaps.items()) if name == "swapped" else "")
        out[name] = steps.report(g, run_phase("expand", {**r, "plan": p}, cfg), t, False, True)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
