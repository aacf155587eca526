"""Plan and expand cost per workload on ipu21 (best homes candidate), like the table in
the previous stack's notes on symbolic exchange analysis: expansion (tile graph), execution
costing, exchange footprint (tables, code, live bytes). Medians of `repeats` runs.

    python experiments/expansion_bench/bench.py [repeats]

Depth must not multiply compile work: a Repeat body is expanded once, so ViT
depth 27 should cost within 20 % of depth 4."""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.expand.analysis import code_instructions, live_peak, step_cycles, table_blob_bytes  # noqa: E402
from compiler.expand.graph import expand_graph  # noqa: E402
from compiler.phases import model_phase, policy_of, target_of  # noqa: E402
from compiler.plan import plan  # noqa: E402
from pipeline.config import compose  # noqa: E402

WORKLOADS = {
    "MLP B1": ["model=mlp"],
    "MLP B2 Repeat3": ["model=mlp", "model.batch=2", "model.repeat=3"],
    "attention B1": ["model=attention"],
    "ViT so400m L4": ["model=vit", "model.layers=4"],
    "ViT so400m L27": ["model=vit", "model.layers=27"],
}


def ms(fn, n):
    out, times = None, []
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return out, statistics.median(times)


def main(n: int):
    print("| workload | plan ms | expansion ms | execution costing ms | exchange footprint ms | transfers |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, ov in WORKLOADS.items():
        cfg = compose(["target=ipu21", *ov])
        t, pol = target_of(cfg), policy_of(cfg)
        m = model_phase(cfg)
        p, t_plan = ms(lambda: plan(m, t, pol), n)
        cand = next(c for c in p.candidates if not c.stationary)   # like for like at every depth: homes
        tg, t_exp = ms(lambda: expand_graph(m.graph, cand.grids, t, pol, cand.label, cand.resident), n)
        _, t_cost = ms(lambda: step_cycles(tg, t), n)
        _, t_foot = ms(lambda: (table_blob_bytes(tg), code_instructions(tg), live_peak(tg)), n)
        print(f"| {name} | {t_plan:.0f} | {t_exp:.0f} | {t_cost:.0f} | {t_foot:.0f} | {len(tg.xfer['src'])} |",
              flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
