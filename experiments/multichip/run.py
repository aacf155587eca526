"""Multi-chip figures (issue #28; experiments/multichip/README.md). Each prints one JSON line.

    python experiments/multichip/run.py one_chip [layers] [weight_dtype]
        So400m tower on one ipu21: model, plan, expand, place (no reference or run: a
        rejection needs neither), the first rejection with its figures, and the blocks'
        parameter bytes against the chip's SRAM
    python experiments/multichip/run.py plan MODEL_PRESET TARGET [layers|-] [weight_dtype] [expand|place]
        model and plan (and expand) on a pod target: the stage split (layers, estimated
        cycles, parameter bytes per chip), each chip's plan (candidates, best estimate)
        and, with `expand` / `place`, each chip's expanded cycles / min free bytes or the rejection

The whole trials (validated on pod2 / pod4) are `python -m pipeline.trial target=pod2 ...`."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from compiler.phases import run_phase, target_of  # noqa: E402
from pipeline.config import compose, validate  # noqa: E402


def _params(g) -> int:
    """Parameter bytes the device holds: a Repeat sequence's every member."""
    seqs = set(g.repeat.sequences) if g.repeat else set()
    return sum(t.nbytes * (g.repeat.count if n in seqs else 1) for n, t in g.tensors.items() if t.kind == "param")


def one_chip(layers: int = 27, dtype: str = "f16") -> dict:
    cfg = validate(compose([f"model.layers={layers}", f"model.weight_dtype={dtype}", "target=ipu21"]))
    res, t0, out = {}, time.time(), {}
    for name in ("model", "plan", "expand", "place"):
        res[name] = run_phase(name, res, cfg)
        rej = getattr(res[name], "rejection", None)
        if name == "model":
            t = target_of(cfg)
            g = res["model"].graph
            out |= {"param_bytes": _params(g), "chip_bytes": t.tiles * t.tile_bytes,
                    "param_share": round(_params(g) / (t.tiles * t.tile_bytes), 4)}
        if rej:
            out |= {"rejected": {"phase": rej.phase, "reason": rej.reason, "message": rej.message, **rej.figures}}
            break
        out[name] = res[name].metrics() if name != "model" else None
    out["host_s"] = round(time.time() - t0, 1)
    return out


def plan(preset: str, target: str, layers: int | None = None, dtype: str = "f16", until: str = "plan") -> dict:
    over = ([f"model={preset}"] if preset.startswith("vit_") else [f"model.preset={preset}"]) + [f"target={target}"]
    over += ([f"model.layers={layers}"] if layers else []) + [f"model.weight_dtype={dtype}"]
    cfg = validate(compose(over))
    res, t0 = {}, time.time()
    for name in ("model", "plan", "expand", "place")[:2 + ("plan", "expand", "place").index(until)]:
        res[name] = run_phase(name, res, cfg)
    p = res["plan"]
    out = {"overrides": over, "model": res["model"].metrics()["name"], "param_bytes": _params(res["model"].graph)}
    if p.rejection:
        out["rejected"] = {"phase": p.rejection.phase, "reason": p.rejection.reason, "message": p.rejection.message}
    if p.split is not None:
        out["split"] = p.split.metrics()
    out["chips"] = [{"candidates": c.metrics()["candidates"],
                     "best_cycles_estimate": c.metrics()["best_cycles_estimate"],
                     "rejected": c.rejection.message if c.rejection else None} for c in p.chips]
    if "expand" in res:
        e = res["expand"]
        out["expand"] = {"rejected": e.rejection.message if e.rejection else None,
                         "cycles": [c.metrics()["cycles"] for c in e.chips],
                         "exchange_table_max_bytes": [c.metrics()["exchange_table_max_bytes"] for c in e.chips]}
    if "place" in res:
        pl = res["place"]
        out["place"] = {"rejected": pl.rejection.message if pl.rejection else None,
                        "min_free_bytes": [c.metrics()["min_free_bytes"] for c in pl.chips]}
    out["host_s"] = round(time.time() - t0, 1)
    return out


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    if what == "one_chip":
        r = one_chip(*(int(args[0]),) if args else (), *args[1:2])
    elif what == "plan":
        r = plan(args[0], args[1], int(args[2]) if len(args) > 2 and args[2] != "-" else None, *args[3:5])
    else:
        raise SystemExit(f"unknown study {what!r}: one_chip | plan")
    print(json.dumps(r, default=str))
