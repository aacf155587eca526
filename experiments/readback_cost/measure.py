"""Cost of run's read-back validation: run-stage host time and peak RSS without it and
with each `policy.check` mode, on the So400m ViT (ipu21).

    python experiments/readback_cost/measure.py LAYERS [fp8] [repeat=N] [none] [rows] [all] [last_iteration] [sampled]

A mode suffixed `-nox` (e.g. `rows-nox`) runs without the exchange check
(policy.check_exchanges=false, compiler/exchange_check.py), `-nos` without check=rows' column
stripes (readback.COLUMN_STRIPES), `-nox-nos` without either: side by side, each one's cost.

Compiles every phase up to lower in-process (serial mapper) and the reference, keeps only
the lower, model and reference results (what the run stage loads), then runs the simulator
without read-back (`none`: lower's dump rows removed) and once per check mode listed. Time:
wall and CPU seconds (user + sys of all threads: robust to other load on the machine). RSS:
this process, sampled every 50 ms by a thread during each run (psutil), so the baseline holds
the model's data and the lowered program as the run stage's does. One unmeasured warm-up run
first (numba's compilation, first touches), then `repeat` rounds of every mode in turn
(default 3); a row gives each mode's medians and its CPU seconds against `none`'s median."""
from __future__ import annotations

import dataclasses
import gc
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import reference_phase, run_phase, target_of  # noqa: E402
from compiler import readback  # noqa: E402
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


def main(layers: int, fp8: bool, modes: list[str], repeat: int = 3):
    cfg = compose(["model=vit", "target=ipu21", f"model.layers={layers}"]
                  + (["model.fp8_activations=true"] if fp8 else []))
    res = {}
    for name in ("model", "plan", "expand", "place", "schedule", "lower"):
        res[name] = run_phase(name, res, cfg)
    lo, model, t = res["lower"], res["model"], target_of(cfg)
    ref = reference_phase(model)                  # the run stage's input, not its work
    del res
    gc.collect()
    label = f"{layers} layers{', fp8 activations' if fp8 else ''}"
    rows = [(m, dataclasses.replace(lo, dump={}) if m == "none" else lo, "all" if m == "none" else m.split("-")[0])
            for m in modes]
    for name, lower_res, check in rows[:2]:     # warm-up: numba's compilation, first touches
        run(lower_res, model, t, check, ref=ref)
    gc.collect()
    got = {name: [] for name, _, _ in rows}
    for _ in range(repeat):
        for name, lower_res, check in rows:
            readback.COLUMN_STRIPES = "-nos" not in name
            r, secs, csecs, base, peak = measured(lambda: run(lower_res, model, t, check, ref=ref,
                                                              check_exchanges="-nox" not in name))
            got[name].append((secs, csecs, base, peak, r.metrics()))
            del r
            gc.collect()

    med = lambda name, k: float(np.median([x[k] for x in got[name]]))
    ref = rows[0][0]
    for name, _, _ in rows:
        m = got[name][-1][4]
        print(f"| {label} | {name} | {med(name, 0):.1f} | {med(name, 1):.2f} | "
              f"{100 * (med(name, 1) / med(ref, 1) - 1):+.1f} % | {med(name, 2):,.0f} | {med(name, 3):,.0f} | "
              f"{100 * (med(name, 3) / med(ref, 3) - 1):+.1f} % | {m.get('ops_checked', 0)} | "
              f"{m['max_abs_error']:.4g} / {m['tolerance']:.4g} | {m['validated']} | {m.get('op_error_ratio', '-')} | "
              f"{m.get('exchange_bytes_checked', 0) / MIB:,.0f} | "
              f"{' '.join(f'{x[1]:.1f}' for x in got[name])} |", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    rep = [int(a.split("=")[1]) for a in args if a.startswith("repeat=")]
    main(int(args[0]), "fp8" in args, [a for a in args[1:] if a != "fp8" and not a.startswith("repeat=")]
         or ["none", "all"], *rep)
