"""Broadcast sends (#26): how much of each exchange step's busiest sender is the same
source range sent to several tiles, and what each step would cost if such a range were
charged to its sender once (docs/architecture.md §2: "a broadcast costs its sender each
byte once"). From expand's tile graph alone, like steps.py.

    python experiments/comm/bcast.py [key=value ...]

Per finalist 0's Repeat body: body cycles as expand costs them, and with every exact
duplicate source range (same step, source tile, request, offset, row shape, relocation)
charged once; per op the exchange cycles both ways; and per step who binds (sender or
receiver) before and after."""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import run_phase, target_of  # noqa: E402
from pipeline.config import compose  # noqa: E402


def once(x, sel):
    """Per selected transfer: True for the first of each group of identical source ranges."""
    key = np.stack([x[f][sel] for f in ("src", "sreq", "soff", "s_row_bytes", "s_rows", "s_stride", "reloc")], 1)
    _, first = np.unique(key, axis=0, return_index=True)
    m = np.zeros(int(sel.sum()), bool)
    m[first] = True
    return m


def measure(g, e, t):
    if e.rejection:
        print("  rejected", e.rejection)
        return None
    f = e.finalists[0]
    tg, a = f.tilegraph, f.analysis
    b0, b1 = tg.body_steps()
    x, T = tg.xfer, tg.tiles
    nb = x["s_row_bytes"] * x["s_rows"]
    per = defaultdict(lambda: [0, 0])
    bind = defaultdict(int)
    dup_bytes = tot_bytes = 0
    patched = False        # expand's analysis already charges once (an estimate's patch)
    for s in range(b0, b1):
        if tg.steps[s] != "exchange":
            continue
        sel = x["step"] == s + 1
        b = nb[sel]
        first = once(x, sel)
        snd = np.bincount(x["src"][sel], b, minlength=T)
        snd1 = np.bincount(x["src"][sel][first], b[first], minlength=T)
        rcv = np.bincount(x["dst"][sel], b, minlength=T)
        c0, c1 = t.exchange_cycles(snd, rcv), t.exchange_cycles(snd1, rcv)
        patched |= c1 + t.sync_cycles == int(a["step_cycles"][s]) != c0 + t.sync_cycles
        op = tg.step_op[s]
        name = g.ops[op].outputs[0] if op >= 0 else "-"
        per[name][0] += c0
        per[name][1] += c1
        bind[("send" if snd.max() > rcv.max() else "recv", "send" if snd1.max() > rcv.max() else "recv")] += 1
        dup_bytes += int(b.sum() - b[first].sum())
        tot_bytes += int(b.sum())
    gain = sum(v[0] - v[1] for v in per.values())
    body = int(a["body_cycles"]) + (gain if patched else 0)   # as charged per pair
    print(f"  {f.candidate.label}")
    print(f"  body {body} -> {body - gain} ({-gain:+d}, {-100 * gain / body:+.2f} %)  "
          f"duplicate bytes {dup_bytes} of {tot_bytes} sent a layer")
    print("  per op exchange (now -> charged once):",
          ", ".join(f"{k} {v[0]}->{v[1]}" for k, v in per.items() if v[0] != v[1]))
    print("  steps by binding side (now, once):", dict(bind))
    return body, body - gain


def main(argv):
    cfg = compose(["model=vit", "target=ipu21", *argv])
    print(" ".join(argv) or "(defaults)")
    r = {"model": run_phase("model", {}, cfg)}
    r["plan"] = run_phase("plan", r, cfg)
    r["expand"] = run_phase("expand", r, cfg)
    return measure(r["model"].graph, r["expand"], target_of(cfg))


if __name__ == "__main__":
    main(sys.argv[1:])
