"""Broadcast sends (#26), measured before building them: how much of each exchange
step's busiest sender is the same source range sent to several tiles, and what each step
would cost with such a range charged to its sender once (docs/architecture.md §2: "a
broadcast costs its sender each byte once"), on the plans chosen WITHOUT
policy.broadcast_sends (with it, steps.py gives the exact figures of the plans it picks).

    python experiments/comm/bcast.py [key=value ...]

Prints finalist 0's Repeat body cycles as expand costs them and re-charged once
(analysis.send_charge's grouping), duplicate bytes, per op the exchange cycles both ways,
and how many exchange steps a sender or a receiver binds, before and after."""
from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.expand.analysis import send_charge  # noqa: E402
from compiler.phases import run_phase, target_of  # noqa: E402
from pipeline.config import compose  # noqa: E402


def measure(g, f, t) -> tuple[int, int]:
    tg = f.tilegraph
    x, T = tg.xfer, tg.tiles
    nb = x["s_row_bytes"] * x["s_rows"]
    once = send_charge(replace(tg, bcast=True))
    per, bind = defaultdict(lambda: [0, 0]), defaultdict(int)
    for s in range(*tg.body_steps()):
        if tg.steps[s] != "exchange":
            continue
        sel = x["step"] == s + 1
        side = lambda w: np.bincount(x["src"][sel], w[sel], minlength=T)
        rcv = np.bincount(x["dst"][sel], nb[sel], minlength=T)
        name = g.ops[tg.step_op[s]].outputs[0] if tg.step_op[s] >= 0 else "-"
        for i, w in enumerate((nb, once)):
            per[name][i] += t.exchange_cycles(side(w), rcv)
        bind[tuple("send" if side(w).max() > rcv.max() else "recv" for w in (nb, once))] += 1
    body = int(f.analysis["body_cycles"])
    gain = sum(a - b for a, b in per.values())
    inb = np.isin(x["step"], np.arange(*tg.body_steps()) + 1)
    print(f"  {f.candidate.label}\n  body {body} -> {body - gain} ({-gain:+d}, {-100 * gain / body:+.2f} %)  "
          f"duplicate bytes {int((nb - once)[inb].sum())} of {int(nb[inb].sum())} sent a layer")
    print("  per op exchange (now -> charged once):",
          ", ".join(f"{k} {a}->{b}" for k, (a, b) in per.items() if a != b))
    print("  exchange steps by binding side (now, once):", dict(bind))
    return body, body - gain


def main(argv):
    cfg = compose(["model=vit", "target=ipu21", *argv, "policy.broadcast_sends=false"])
    print(" ".join(argv) or "(defaults)")
    r = {"model": run_phase("model", {}, cfg)}
    r["plan"] = run_phase("plan", r, cfg)
    r["expand"] = run_phase("expand", r, cfg)
    if r["expand"].rejection:
        print("  rejected", r["expand"].rejection)
        return None
    return measure(r["model"].graph, r["expand"].finalists[0], target_of(cfg))


if __name__ == "__main__":
    main(sys.argv[1:])
