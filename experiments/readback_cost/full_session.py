"""One full-size session for issue #23's figures: each activation mode compiled once (So400m
tower, 4 layers, ipu21, check=rows), then measure.py's CPU cost rows and planted.py's
table rows on that same compile -- on this shared 2-core machine a full compile takes
~15 minutes, so the two scripts' compiles are shared here (each script alone reproduces
its own part).

    python experiments/readback_cost/full_session.py [repeat=N] [fp16|fp8 ...] [--kinds SUBSTR ...]
"""
from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "planted"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dataclasses  # noqa: E402

import plants  # noqa: E402
from measure import measured  # noqa: E402
from planted import FULL, fmt  # noqa: E402
from compiler import readback  # noqa: E402
from compiler.phases import target_of  # noqa: E402
from compiler.run import run  # noqa: E402

MODES = ("none", "rows", "rows-nox", "rows-nox-nos")
KINDS = ("stale", "drops", "swaps", "k-group", "tile skips", "column unwritten", "wrong byte", "scale from",
         "NaN in an op")


def main(argv):
    rep = next((int(a.split("=")[1]) for a in argv if a.startswith("repeat=")), 3)
    modes = [m for m in ("fp16", "fp8") if m in argv] or ["fp16", "fp8"]
    kinds = argv[argv.index("--kinds") + 1:] if "--kinds" in argv else KINDS
    target = yaml.safe_load((ROOT / "conf" / "target" / "ipu21.yaml").read_text())
    for mode in modes:
        t0 = time.perf_counter()
        r = plants.trial(target, mode == "fp8", model=FULL, check="rows")
        print(f"## {mode}: compiled in {time.perf_counter() - t0:.0f} s; clean run: {r['run'].metrics().get('failed', 'validated')}",
              flush=True)
        lo, model, t, ref = r["lower"], r["model"], target_of(r["cfg"]), r["reference"]
        rows = [(m, dataclasses.replace(lo, dump={}) if m == "none" else lo) for m in MODES]
        got = {m: [] for m in MODES}
        for _ in range(rep):
            for name, lower_res in rows:
                readback.COLUMN_STRIPES = "-nos" not in name
                res, secs, csecs, base, peak = measured(lambda: run(lower_res, model, t, "rows", ref=ref,
                                                                    check_exchanges="-nox" not in name))
                got[name].append((csecs, peak, res.metrics()))
                del res
                gc.collect()
        readback.COLUMN_STRIPES = True
        med = lambda name, k: float(np.median([x[k] for x in got[name]]))
        print("| mode | check | CPU s (median) | vs none | runs | peak RSS MiB | vs none | ops checked | exchanged MiB compared | validated |")
        print("|---|---|---:|---:|---|---:|---:|---:|---:|---|")
        for name in MODES:
            m = got[name][-1][2]
            print(f"| {mode} | {name} | {med(name, 0):.2f} | {100 * (med(name, 0) / med('none', 0) - 1):+.1f} % | "
                  f"{' '.join(f'{x[0]:.1f}' for x in got[name])} | {med(name, 1):,.0f} | "
                  f"{100 * (med(name, 1) / med('none', 1) - 1):+.1f} % | {m.get('ops_checked', 0)} | "
                  f"{m.get('exchange_bytes_checked', 0) / 2 ** 20:,.0f} | {m['validated']} |", flush=True)
        print("\n| mode | kind | layer | caught | by | first named op (iteration, tile) | its error / bound |")
        print("|---|---|---|---|---|---|---|")
        L = model.graph.repeat.count
        for kind in plants.KINDS:
            if kind.where == "model" or not any(k in kind.name for k in kinds) or (kind.fp8_only and mode == "fp16"):
                continue
            layer = L // 2 if kind.per_layer else None
            o = plants.outcome(r, kind, 1 if layer is None else layer)
            by = [b + (" (column stripes)" if b == "op read-back" and o.get("view") == "columns" else "") for b in o["by"]]
            named = "-" if o["op"] == "-" else f"`{o['op']}` ({o['iteration']}, {o['tile']})"
            print(f"| {mode} | {kind.name} | {'program' if layer is None else layer} | {'yes' if o['caught'] else '**no**'} | "
                  f"{', '.join(by) or '-'} | {named} | {fmt(o['error'])} / {fmt(o['bound'])} |", flush=True)
        del r, rows, lo
        gc.collect()


if __name__ == "__main__":
    main(sys.argv[1:])
