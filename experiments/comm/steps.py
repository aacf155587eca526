"""Where a layer's exchange goes, per superstep, from the expanded tile graph alone
(model -> plan -> expand; no placement, no simulator): for each exchange step of the
Repeat body, the op that opened it, its cycles, the busiest tile's sent and received
bytes, total bytes, and how many tiles send / receive; plus expand's exact body cycles.

    python experiments/comm/steps.py [key=value ...]      e.g. model.layers=27

expand's cycles are the simulator's (a test holds them equal), so this is the quick loop
for plan changes; the validated figures come from ops_trial.py."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import run_phase  # noqa: E402
from pipeline.config import compose  # noqa: E402


def main(argv):
    cfg = compose(["model=vit", "target=ipu21", *argv])
    res = {}
    for name in ("model", "plan", "expand"):
        res[name] = run_phase(name, res, cfg)
    g, e = res["model"].graph, res["expand"]
    if e.rejection:
        print("rejected", e.rejection)
        return
    for k, f in enumerate(e.finalists):
        tg, a = f.tilegraph, f.analysis
        b0, b1 = tg.body_steps()
        print(f"finalist {k}: body cycles {a['body_cycles']}  {f.candidate.label}")
    f = e.finalists[0]
    tg, a = f.tilegraph, f.analysis
    b0, b1 = tg.body_steps()
    x = tg.xfer
    nb = x["s_row_bytes"] * x["s_rows"]
    T = tg.tiles
    tot = {"exchange": 0, "compute": 0}
    for s in range(b0, b1):
        kind = tg.steps[s]
        cyc = int(a["step_cycles"][s])
        tot[kind] += cyc
        op = tg.step_op[s]
        name = g.ops[op].outputs[0] if op >= 0 else "-"
        if kind == "exchange":
            sel = x["step"] == s + 1
            snd = np.bincount(x["src"][sel], nb[sel], minlength=T)
            rcv = np.bincount(x["dst"][sel], nb[sel], minlength=T)
            print(f"  x{s:4d} {name:12s} {cyc:7d}  send max {int(snd.max()):7d} recv max {int(rcv.max()):7d} "
                  f"total {int(nb[sel].sum()):9d} senders {int((snd > 0).sum()):5d} receivers {int((rcv > 0).sum()):5d}")
        else:
            print(f"  c{s:4d} {name:12s} {cyc:7d}")
    print("body", a["body_cycles"], tot)


if __name__ == "__main__":
    main(sys.argv[1:])
