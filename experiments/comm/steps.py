"""Where a layer's cycles go, per superstep and per op, from the expanded tile graph
alone (model -> plan -> expand; no placement, no simulator). expand's cycles are the
simulator's (tests hold them equal), so this is the quick loop for plan changes; the
validated figures come from ops_trial.py.

    python experiments/comm/steps.py [key=value ...] [/ key=value ... / ...]

The overrides before the first `/` are common (the model is built once); each group
after one is a variant (policy keys) planned and expanded on that model. For each:
the finalists' body cycles, then per exchange step of the Repeat body the op that
opened it, its cycles, the busiest tile's sent and received bytes, total bytes and
senders / receivers (with -v; per compute step the tiles with kernels, at the step's
length, and idle), and per op the body's exchange and compute cycles;
with -v also compute split on each compute step's busiest tile into AMP (MATMUL),
vector (every other kernel but COPY), COPY (the ring's local copies), and the steps'
syncs (every superstep's, exchange and compute alike). With -a, per matmul the busiest
tile's AMP cycles cut into the terms of its PopLibs estimate above the floor (amp.py).
e.g.  steps.py model.layers=27 / policy.ring_homes=false policy.early_gathers=false /"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler import isa  # noqa: E402
from compiler.expand.analysis import kernel_cycles, send_charge  # noqa: E402
from compiler.phases import run_phase, target_of  # noqa: E402
from experiments.comm.amp import frontier, op_gaps, print_frontier, print_gaps  # noqa: E402
from pipeline.config import compose  # noqa: E402


def report(g, e, t, verbose: bool, gaps: bool = False) -> dict:
    if e.rejection:
        print("rejected", e.rejection)
        return {}
    for k, f in enumerate(e.finalists):
        print(f"  finalist {k}: body cycles {f.analysis['body_cycles']}  {f.candidate.label}")
    f = e.finalists[0]
    tg, a = f.tilegraph, f.analysis
    b0, b1 = tg.body_steps()
    x, T = tg.xfer, tg.tiles
    nb = x["s_row_bytes"] * x["s_rows"]
    per = defaultdict(lambda: [0, 0])
    split = defaultdict(lambda: np.zeros(5, np.int64))     # exchange, amp, vector, copy, sync
    kc, k = kernel_cycles(tg, t), tg.kern
    for s in range(b0, b1):
        kind, cyc, op = tg.steps[s], int(a["step_cycles"][s]), tg.step_op[s]
        name = g.ops[op].outputs[0] if op >= 0 else "-"
        per[name][kind == "compute"] += cyc
        split[name][4] += t.sync_cycles
        if kind == "exchange":
            split[name][0] += cyc - t.sync_cycles
        else:                                   # the busiest tile's kernels by kind
            sel = k["step"] == s + 1
            w = np.bincount(k["tile"][sel], kc[sel], minlength=T).argmax()
            on = sel & (k["tile"] == w)
            mm, cp = on & (k["op"] == isa.MATMUL), on & (k["op"] == isa.COPY)
            split[name][1:4] += [kc[mm].sum(), kc[on & ~mm & ~cp].sum(), kc[cp].sum()]
            if verbose:                         # room a tile has in this step: max less its own kernels
                busy = np.bincount(k["tile"][sel], kc[sel], minlength=T)
                print(f"    c{s:4d} {name:12s} {cyc:7d}  tiles busy {int((busy > 0).sum()):5d} at max "
                      f"{int((busy == busy.max()).sum()):5d} idle {int((busy == 0).sum()):5d}")
        if kind == "exchange" and verbose:
            sel = x["step"] == s + 1
            snd = np.bincount(x["src"][sel], send_charge(tg)[sel], minlength=T)   # a multicast once
            rcv = np.bincount(x["dst"][sel], nb[sel], minlength=T)
            print(f"    x{s:4d} {name:12s} {cyc:7d}  send max {int(snd.max()):7d} recv max {int(rcv.max()):7d} "
                  f"total {int(nb[sel].sum()):9d} senders {int((snd > 0).sum()):5d} receivers {int((rcv > 0).sum()):5d}")
    out = {"body": int(a["body_cycles"]), "candidate": f.candidate.label,
           "ops": {k: {"exchange": v[0], "compute": v[1]} for k, v in per.items()},
           "split": {k: dict(zip(("exchange", "amp", "vector", "copy", "sync"), map(int, v)))
                     for k, v in split.items()}}
    print("  body", out["body"], " exchange", sum(v[0] for v in per.values()), " compute", sum(v[1] for v in per.values()))
    print("  per op (exchange / compute):", ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in per.items()))
    if verbose:
        print("  per op (exchange / amp / vector / copy / sync):",
              ", ".join(f"{k} {'/'.join(map(str, v.values()))}" for k, v in out["split"].items()))
    if gaps:
        out["amp"] = op_gaps(g, tg, t, kc)
        print_gaps(out["amp"])
        print_frontier(frontier(g, t, out["amp"]))
    return out


def split_variants(argv) -> tuple[list, list]:
    """`common / variant / variant ...` -> (common overrides, [variant overrides]) ([[]]: none)."""
    groups, cur = [], []
    for a in argv + ["/"]:
        if a == "/":
            groups.append(cur)
            cur = []
        else:
            cur.append(a)
    return groups[0], (groups[1:] if len(groups) > 1 else [[]])


def expanded(argv):
    """For each variant of `common / variant / ...`: (its label, the graph, expand's result,
    the target), the model built once from the common overrides."""
    common, variants = split_variants(argv)
    cfg0 = compose(["model=vit", "target=ipu21", *common])
    res = {"model": run_phase("model", {}, cfg0)}
    for v in variants:
        cfg = compose(["model=vit", "target=ipu21", *common, *v])
        print(" ".join(common + v) or "(defaults)")
        r = dict(res)
        r["plan"] = run_phase("plan", r, cfg)
        r["expand"] = run_phase("expand", r, cfg)
        yield " ".join(v) or "default", res["model"].graph, r["expand"], target_of(cfg)


def main(argv):
    verbose, gaps = "-v" in argv, "-a" in argv
    results = {label: report(g, e, t, verbose, gaps)
               for label, g, e, t in expanded([a for a in argv if a not in ("-v", "-a")])}
    print(json.dumps({k: v.get("body") for k, v in results.items()}))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
