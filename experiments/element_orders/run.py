"""Element orders: FP8 weights in AMP micro-panel homes against row-major ones.

    python experiments/element_orders/run.py > experiments/element_orders/results.md

1. Home shards of the So400m weights on ipu21 (no compile): the fullest tile's bytes of
   one member with whole-row homes and with micro-panel homes (plan/homes.py), against
   an even split.
2. ViT so400m trials on ipu21: the default (panel homes), weights in homes only
   (policy.weight_stationary=false, so every weight is gathered each layer), and the
   ablation policy.panel_homes=false (row-major FP8 homes: every gather into the
   MATMUL's micro-panels would be a byte-wise permutation)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import PHASES, run_phase  # noqa: E402
from compiler.plan.homes import home_blocks  # noqa: E402
from compiler.target import Target  # noqa: E402
from pipeline.config import compose  # noqa: E402

SHAPES = {"qkv": (1152, 3456), "proj": (1152, 1152), "fc1": (1152, 4304), "fc2": (4304, 1152)}


def shards():
    t = Target.load("ipu21")
    P = t.amp_panel_elems["fp8"]
    print("| weight [k, n] | whole rows: fullest tile B | micro-panels: fullest tile B (blocks) | even split B |")
    print("|---|---:|---:|---:|")
    for name, (R, C) in SHAPES.items():
        _, rows = home_blocks(R, C, 1, t.tiles)
        _, pan = home_blocks(R, C, 1, t.tiles, P)
        print(f"| {name} [{R}, {C}] | {rows.max()} | {pan.max()} ({len(pan)}) | {-(-R * C // t.tiles)} |")


def trial(*overrides):
    cfg = compose(["model=vit", "target=ipu21", *overrides])
    res, t0 = {}, time.perf_counter()
    for name in PHASES:
        res[name] = run_phase(name, res, cfg)
    return res, time.perf_counter() - t0


def trials(runs):
    print("\n| trial | status | cycles/layer | exchange table, fullest tile B | min free B | rejection | host s |")
    print("|---|---|---:|---:|---:|---|---:|")
    for label, ov in runs:
        r, secs = trial(*ov)
        s = r["report"].summary
        rej = s.get("rejected")
        why = f"{rej['phase']}, {rej['reason']}: {rej['message']}" if rej else "-"
        ex, run = r["expand"].metrics(), r["run"].metrics()
        print(f"| {label} | {s['status']} | {run.get('cycles_per_layer', '-')} | "
              f"{ex.get('exchange_table_max_bytes') or '-'} | {r['place'].metrics().get('min_free_bytes', '-')} | "
              f"{why} | {secs:.0f} |", flush=True)


if __name__ == "__main__":
    shards()
    trials([("4 layers (default)", ["model.layers=4"]),
            ("4 layers, homes only", ["model.layers=4", "policy.weight_stationary=false"]),
            ("4 layers, `policy.panel_homes=false`", ["model.layers=4", "policy.panel_homes=false",
                                                      "policy.weight_stationary=false"]),
            ("27 layers (default)", ["model.layers=27"])])
