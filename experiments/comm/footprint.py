"""What fills the fullest tiles of the best candidate (#26 step 1: measure before shrinking).

    python experiments/comm/footprint.py [key=value ...] [--top N]

Plans and expands (no placement) and, for the best finalist, prints the tiles with the
least free bytes (expand's footprint_bytes: peak live requests + support), the event of
each one's peak, and what is live there, by buffer kind: resident / home sequences (every
layer's members), the matmuls' A and B operand buffers, partials (.p), received partials
(.recv), relay pieces (@), other activations. The same break-down is summed over the
tiles whose free bytes are within 8 KB of the least, so one kind of buffer stands out.
expand's figures are what place proves or refutes (a live-byte lower bound)."""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.expand.analysis import _span  # noqa: E402
from compiler.phases import run_phase, target_of  # noqa: E402
from pipeline.config import compose  # noqa: E402


def kind(name: str) -> str:
    if name.endswith(".home") or name.startswith("weights."):
        return "homes/resident (all layers)"
    for suf, k in ((".a", "A operand"), (".b", "B operand"), (".p", "partials"), (".recv", "received partials")):
        if name.endswith(suf):
            return k
    return "relay pieces" if "@" in name else "activations/other"


def live_at(tg, tile: int, event: int) -> dict:
    r = tg.req
    on = (r["tile"] == tile) & (r["start"] <= event) & (r["end"] > event)
    sz = _span(r)
    out = defaultdict(int)
    for i in np.flatnonzero(on):
        out[tg.names[r["name"][i]]] += int(sz[i])
    return out


def main(argv):
    top = 5
    if "--top" in argv:
        k = argv.index("--top")
        top, argv = int(argv[k + 1]), argv[:k] + argv[k + 2:]
    cfg = compose(["model=vit", "target=ipu21", *argv])
    r = {"model": run_phase("model", {}, cfg)}
    r["plan"] = run_phase("plan", r, cfg)
    r["expand"] = run_phase("expand", r, cfg)
    e = r["expand"]
    if e.rejection:
        print("rejected", e.rejection)
        return
    f = e.finalists[0]
    tg, a = f.tilegraph, f.analysis
    cap = target_of(cfg).tile_bytes
    fp, peak = np.asarray(a["footprint_bytes"]), np.asarray(a["peak_bytes"])
    free = cap - fp
    print(f"{f.candidate.label}\n  body cycles {a['body_cycles']}; free bytes: least {int(free.min())}, "
          f"median {int(np.median(free))}; support on the fullest {int(fp[np.argmin(free)] - peak[np.argmin(free)])}")
    order = np.argsort(free, kind="stable")[:top]
    for t in order:
        ev = int(a["peak_event"][t])
        live = live_at(tg, int(t), ev)
        by = defaultdict(int)
        for n, b in live.items():
            by[kind(n)] += b
        print(f"  tile {int(t)}: free {int(free[t])}, peak {int(peak[t])} at event {ev} "
              f"({tg.steps[ev - 1] if 0 < ev <= len(tg.steps) else '-'}, op {tg.step_op[ev - 1] if 0 < ev <= len(tg.steps) else '-'})")
        for k, b in sorted(by.items(), key=lambda kv: -kv[1]):
            print(f"      {k:28s} {b:8d}")
        for n, b in sorted(live.items(), key=lambda kv: -kv[1])[:40]:
            print(f"        {n:40s} {b:8d}")
    near = np.flatnonzero(free <= free.min() + 8192)
    tot = defaultdict(int)
    for t in near:
        for n, b in live_at(tg, int(t), int(a["peak_event"][t])).items():
            tot[kind(n)] += b
    print(f"  {len(near)} tiles within 8 KB of the least free; mean live bytes at their peaks by kind:")
    for k, b in sorted(tot.items(), key=lambda kv: -kv[1]):
        print(f"      {k:28s} {b // len(near):8d}")


if __name__ == "__main__":
    main(sys.argv[1:])
