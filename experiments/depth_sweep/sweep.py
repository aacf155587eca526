"""Depth sweep: So400m FP8 ViT on ipu21 at model.layers 1, 2, 4, 8, 16, 27.

    python experiments/depth_sweep/sweep.py [layers ...] > experiments/depth_sweep/results.md

For each depth: the status, cycles per layer when it runs, and for a rejection its
phase, reason, tile and deficit (a rejection is data, docs/architecture.md §3); host seconds per
phase and the process's peak RSS. Runs every phase in-process (serial mapper)."""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import PHASES, run_phase  # noqa: E402
from pipeline.config import compose  # noqa: E402


def trial(layers: int) -> dict:
    cfg = compose(["model=vit", "target=ipu21", f"model.layers={layers}"])
    res, secs = {}, {}
    for name in PHASES:
        t0 = time.perf_counter()
        res[name] = run_phase(name, res, cfg)
        secs[name] = time.perf_counter() - t0
    s = res["report"].summary
    return dict(layers=layers, status=s["status"], rejected=s.get("rejected"), run=res["run"].metrics(),
                place=res["place"].metrics(), secs=secs,
                peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main(depths):
    print("| layers | status | cycles/layer | max abs err / tol | first rejection (phase, reason, tile, deficit B) "
          "| min free B | host s (expand / place / run) |")
    print("|---:|---|---:|---|---|---:|---|")
    for L in depths:
        r = trial(L)
        rej = r["rejected"]
        why = (f"{rej['phase']}, {rej['reason']}, tile {rej.get('tile', '-')}, {rej.get('deficit_bytes', '-')}"
               if rej else "-")
        run = r["run"]
        err = f"{run['max_abs_error']:.4g} / {run['tolerance']:.4g}" if "cycles" in run else "-"
        s = r["secs"]
        print(f"| {L} | {r['status']} | {run.get('cycles_per_layer', '-')} | {err} | {why} | "
              f"{r['place'].get('min_free_bytes')} | {s['expand']:.1f} / {s['place']:.1f} / {s['run']:.1f} |",
              flush=True)


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [1, 2, 4, 8, 16, 27])
