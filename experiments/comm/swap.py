"""Does plan's cost search miss a cheaper grid? Each weight matmul's grid swapped, one
at a time, into plan's best candidate, and the swap measured by expand's exact cycles.

    python experiments/comm/swap.py [--top N] [--ops qkv.xw,fc1.xw,...] [--grids op=LABEL,...] [key=value ...]

For every matmul named (default: those whose b is a parameter, in the Repeat body if
there is one), its plan options (every
grid of plan/matmul.py with the relay and ring variants plan's beam prices, ranked by
the standalone estimate) are tried in that order, the N best distinct labels besides
the candidate's own; every other op keeps the candidate's grid. Each variant is expanded
(no placement) and its body cycles printed beside the estimate, or the reason expand
rejects it (for memory: the deficit and the cycles the swap would have had). If no swap is cheaper, the candidate is a local optimum of expand's own
figure over what plan can choose: a gap left is not the beam's pricing but the options
(experiments/comm/README.md). Spearman's rank correlation of estimate and exact cycles
per op says how well the standalone estimate ranks them. --grids tries the named grids
only (labels as plan prints them, e.g. qkv.xw=9x27x6~ring: the 4-layer grids at depth)."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.expand import expand_one  # noqa: E402
from compiler.phases import policy_of, run_phase, target_of  # noqa: E402
from compiler.plan import matmul_options  # noqa: E402
from compiler.plan.options import with_relay  # noqa: E402
from compiler.plan.homes import home_bytes, panel_weights  # noqa: E402
from compiler.plan.ring import with_rings  # noqa: E402
from pipeline.config import compose  # noqa: E402


def options(g, n, t, pol, panels, homes):
    """Matmul n's grids as plan's beam sees them (plan/__init__.py plan)."""
    o = matmul_options(g, n, t, pol, homes)[0]
    o = with_relay(o) if pol.operand_relay and pol.plan_beam else o
    if pol.ring_homes and pol.plan_beam:
        o = with_rings(g, {n: o}, t, panels, pol.ring_copies, pol.ring_in_place, pol.ring_units)[n]
    return o


def ranks(x) -> np.ndarray:
    return np.argsort(np.argsort(x, kind="stable"), kind="stable")


def main(argv):
    top, names, pick = 20, None, {}
    args = []
    it = iter(argv)
    for a in it:
        if a == "--top":
            top = int(next(it))
        elif a == "--ops":
            names = next(it).split(",")
        elif a == "--grids":
            for kv in next(it).split(","):
                op, label = kv.split("=")
                pick.setdefault(op, []).append(label)
            names = sorted(pick)
        else:
            args.append(a)
    cfg = compose(["model=vit", "target=ipu21", *args])
    res = {"model": run_phase("model", {}, cfg)}
    p = run_phase("plan", res, cfg)
    g, t, pol = res["model"].graph, target_of(cfg), policy_of(cfg)
    panels = panel_weights(g, t, pol.panel_homes)
    homes = home_bytes(g, t, panels, pol.vector_homes)
    best = p.candidates[0]
    e0 = expand_one(best, g, t, pol)
    base = e0.analysis["body_cycles"]
    print("candidate", base, best.label, flush=True)
    seq = set(g.repeat.sequences) if g.repeat else None    # default: the Repeat body's weight matmuls
    ops = [n for n, _ in best.strategy if g.ops[n].outputs[0] in names] if names else \
        [n for n, _ in best.strategy if g.tensors[g.ops[n].inputs[1]].kind == "param"
         and (seq is None or g.ops[n].inputs[1] in seq)]
    found = {}
    for n in ops:
        o = options(g, n, t, pol, panels, homes)
        seen, est, exact = {best.grids[n].label}, [], []
        for i in np.argsort(o.a["cycles"], kind="stable"):
            gr = o.grid(int(i))
            if gr.label in seen or (pick and gr.label not in pick.get(g.ops[n].outputs[0], ())):
                continue
            seen.add(gr.label)
            if len(seen) > top + 1:
                break
            c = replace(best, strategy=tuple((m, gr if m == n else x) for m, x in best.strategy))
            e = expand_one(c, g, t, pol)
            tag = e.reason or f"body {e.analysis['body_cycles']} ({e.analysis['body_cycles'] - base:+d})"
            if e.reason == "memory" and "body_cycles" in e.analysis:     # what the memory would have bought
                tag += f" (deficit {e.figures.get('deficit_bytes')} B; body would be {e.analysis['body_cycles']})"
            print(f"  {g.ops[n].outputs[0]:8s} {gr.label:22s} estimate {int(o.a['cycles'][i]):7d}  {tag}", flush=True)
            if not e.reason:
                est.append(int(o.a["cycles"][i]))
                exact.append(e.analysis["body_cycles"])
        for label in sorted(set(pick.get(g.ops[n].outputs[0], ())) - seen):
            print(f"  {g.ops[n].outputs[0]:8s} {label:22s} not among plan's options (its memory screen)")
        if len(est) > 1:
            a, b = ranks(est), ranks(exact)
            rho = 1 - 6 * float(((a - b) ** 2).sum()) / (len(a) * (len(a) ** 2 - 1))
        else:
            rho = float("nan")
        found[g.ops[n].outputs[0]] = {"admitted": len(exact), "best": min(exact, default=None), "spearman": rho}
        print(f"  {g.ops[n].outputs[0]}: {len(exact)} admitted, best swap {min(exact, default='-')}, "
              f"Spearman {rho:.2f}", flush=True)
    return base, found


if __name__ == "__main__":
    main(sys.argv[1:])
