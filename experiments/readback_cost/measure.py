"""Cost of run's read-back validation: run-stage host time and peak RSS without it and
with each `policy.check` mode, on the So400m ViT (ipu21).

    python experiments/readback_cost/measure.py LAYERS [fp8] [none] [all] [last_iteration] [sampled]

Compiles every phase up to lower in-process (serial mapper), keeps only the lower and
model results (what the run stage loads), then runs the simulator without read-back
(`none`: lower's dump rows removed) and once per check mode listed. Time: wall and CPU
seconds (user + sys of all threads: robust to other load on the machine). RSS: this process,
sampled every 50 ms by a thread during each run (psutil), so the baseline holds the
model's data and the lowered program as the run stage's does."""
from __future__ import annotations

import dataclasses
import gc
import resource
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import run_phase, target_of  # noqa: E402
from compiler.run import run  # noqa: E402
from pipeline.config import compose  # noqa: E402

MIB = 2 ** 20


def measured(fn):
    proc, peak, stop = psutil.Process(), [psutil.Process().memory_info().rss], threading.Event()

    def sample():
        while not stop.wait(0.05):
            peak[0] = max(peak[0], proc.memory_info().rss)
    th = threading.Thread(target=sample, daemon=True)
    base = proc.memory_info().rss
    th.start()
    cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    t0, c0 = time.perf_counter(), cpu()
    out = fn()
    secs, csecs = time.perf_counter() - t0, cpu() - c0
    stop.set()
    th.join()
    peak[0] = max(peak[0], proc.memory_info().rss)
    return out, secs, csecs, base / MIB, peak[0] / MIB


def main(layers: int, fp8: bool, modes: list[str]):
    cfg = compose(["model=vit", "target=ipu21", f"model.layers={layers}"]
                  + (["model.fp8_activations=true"] if fp8 else []))
    res = {}
    for name in ("model", "plan", "expand", "place", "schedule", "lower"):
        res[name] = run_phase(name, res, cfg)
    lo, model, t = res["lower"], res["model"], target_of(cfg)
    del res
    gc.collect()
    label = f"{layers} layers{', fp8 activations' if fp8 else ''}"
    rows = [(m, dataclasses.replace(lo, dump={}) if m == "none" else lo, "all" if m == "none" else m) for m in modes]
    first = None
    for name, lower_res, check in rows:
        r, secs, csecs, base, peak = measured(lambda: run(lower_res, model, t, check))
        m = r.metrics()
        first = first or (csecs, peak)
        print(f"| {label} | {name} | {secs:.1f} | {csecs:.1f} | {100 * (csecs / first[0] - 1):+.0f} % | {base:,.0f} | "
              f"{peak:,.0f} | {100 * (peak / first[1] - 1):+.1f} % | {m.get('ops_checked', 0)} | "
              f"{m['max_abs_error']:.4g} / {m['tolerance']:.4g} | {m['validated']} | {m.get('op_error_ratio', '-')} |",
              flush=True)
        del r
        gc.collect()


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]), "fp8" in args, [a for a in args[1:] if a != "fp8"] or ["none", "all"])
