"""Where attention's cycles go, grid by grid: the default plan's best candidate with the
grid of one attention matmul (scores, or P·V) replaced by each of its `--top` best
standalone grids (plan/matmul.py), expanded exactly (expand_one: the simulator's
cycles, tests hold them equal) -- the body's cycles and the per-op exchange / compute.
No placement, no simulator: the quick loop for attention plans.

    python experiments/attention/explore.py [--op attn|scores] [--top N] [key=value ...]
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.expand import expand_one  # noqa: E402
from compiler.phases import run_phase  # noqa: E402
from compiler.plan import matmul_options  # noqa: E402
from compiler.plan.homes import home_bytes, panel_weights  # noqa: E402
from pipeline.config import compose  # noqa: E402


def per_op(g, e):
    tg, a = e.tilegraph, e.analysis
    b0, b1 = tg.body_steps()
    out = {}
    for s in range(b0, b1):
        op = tg.step_op[s]
        name = g.ops[op].outputs[0] if op >= 0 else "-"
        x = out.setdefault(name, [0, 0])
        x[tg.steps[s] == "compute"] += int(a["step_cycles"][s])
    return out


def main(argv):
    which, top, fix = "attn", 8, {}
    rest = []
    it = iter(argv)
    for a in it:
        if a == "--op":
            which = next(it)
        elif a == "--top":
            top = int(next(it))
        elif a == "--fix":                 # --fix OP=LABEL: that op's grid first set to a grid of that label
            k, _, v = next(it).partition("=")
            fix[k] = v
        else:
            rest.append(a)
    cfg = compose(["model=vit", "target=ipu21", *rest])
    r = {"model": run_phase("model", {}, cfg)}
    r["plan"] = run_phase("plan", r, cfg)
    g = r["model"].graph
    from compiler.phases import target_of, policy_of
    t, pol = target_of(cfg), policy_of(cfg)
    cand = r["plan"].candidates[0]
    panels = panel_weights(g, t, pol.panel_homes)
    homes = home_bytes(g, t, panels, pol.vector_homes)

    def options(m):
        return matmul_options(g, m, t, pol, homes)[0]
    for name, label in fix.items():
        m = next(i for i, op in enumerate(g.ops) if op.outputs[0] == name)
        o = options(m)
        gr = next(o.grid(i) for i in range(len(o)) if o.grid(i).label == label)
        cand = replace(cand, strategy=tuple((k, gr if k == m else x) for k, x in cand.strategy))
    n = next(i for i, op in enumerate(g.ops) if op.outputs[0] == which)
    opts = options(n)
    tried = [cand.grids[n]] + [opts.grid(i) for i in range(min(top, len(opts)))]
    for k, gr in enumerate(tried):
        c = replace(cand, strategy=tuple((m, gr if m == n else x) for m, x in cand.strategy))
        t0 = time.time()
        e = expand_one(c, g, t, pol)
        if e.reason:
            print(f"{gr.label:16s} rejected {e.reason}: {e.message}")
            continue
        po = per_op(g, e)
        att = {k2: po.get(k2, [0, 0]) for k2 in ("scores", "probs", "attn")}
        print(f"{'(plan) ' if k == 0 else ''}{gr.label:16s} body {int(e.analysis['body_cycles']):8d}  "
              + "  ".join(f"{k2} {v[0]}/{v[1]}" for k2, v in att.items())
              + f"  attn-sum {sum(sum(v) for v in att.values())}  ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
