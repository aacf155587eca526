"""Depth sweep: So400m FP8 ViT on ipu21 at model.layers 1, 2, 4, 8, 16, 27.

    python experiments/depth_sweep/sweep.py [layers ...] [key=value ...] [--ops DIR] > rows.md

For each depth: the status, cycles per layer when it runs, the error against its
tolerance, and for a rejection its phase, reason, tile and deficit (a rejection is
data, docs/architecture.md §3); the minimum free bytes of the placement; per encoder
matmul the weight mode of the placed candidate (R×r: resident, replication r = the
tiles holding each block; H: gathered from its home each layer; ring: homed in pieces
on its grid's tiles, swapped each layer) with its grid and the
resident bytes per tile; host seconds per phase. Extra Hydra overrides (key=value,
e.g. policy.resident_replication=1) apply to every depth. Runs every phase in-process
(serial mapper). --ops DIR also writes each depth's per-op cycles (the report's ops.csv) as
DIR/<f16|fp8>-<layers>.csv, the files experiments/roofline/roofline.py --ops DIR reads."""
from __future__ import annotations

import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import PHASES, run_phase  # noqa: E402
from compiler.plan import weight_modes  # noqa: E402
from pipeline.config import compose  # noqa: E402

BODY = ("attn.qkv.weight", "attn.proj.weight", "mlp.fc1.weight", "mlp.fc2.weight")


def trial(layers: int, overrides: list, ops: Path | None = None) -> dict:
    cfg = compose(["model=vit", "target=ipu21", f"model.layers={layers}", *overrides])
    res, secs = {}, {}
    for name in PHASES:
        t0 = time.perf_counter()
        res[name] = run_phase(name, res, cfg)
        secs[name] = time.perf_counter() - t0
    s = res["report"].summary
    if ops is not None and "ops.csv" in res["report"].plots:
        act = "fp8" if "model.fp8_activations=true" in overrides else "f16"
        ops.mkdir(parents=True, exist_ok=True)
        (ops / f"{act}-{layers}.csv").write_text(res["report"].plots["ops.csv"])
    placed = getattr(res["place"], "placement", None)
    modes = {}
    if placed is not None and res["expand"].finalists:
        modes = weight_modes(res["model"].graph, res["expand"].finalists[placed.finalist].candidate)
    return dict(layers=layers, status=s["status"], rejected=s.get("rejected"), run=res["run"].metrics(),
                place=res["place"].metrics(), secs=secs, modes=modes)


def mode(m: dict | None) -> str:
    if not m:
        return "-"
    if m["mode"] in ("homes", "ring"):          # gathered every layer: from homes (H) or ring pieces
        return f"{'H' if m['mode'] == 'homes' else 'ring'} {m['grid']}"
    return f"R×{m['replication']} {m['grid']} {m['resident_bytes'] / 1024:.0f}K"


def main(depths, overrides, ops=None):
    print("| layers | status | cycles/layer | max abs err / tol | qkv / proj / fc1 / fc2 weights "
          "| min free B | first rejection (phase, reason, tile, deficit B) | host s (expand / place / run) |")
    print("|---:|---|---:|---|---|---:|---|---|")
    for L in depths:
        r = trial(L, overrides, ops)
        rej = r["rejected"]
        why = (f"{rej['phase']}, {rej['reason']}, tile {rej.get('tile', '-')}, {rej.get('deficit_bytes', '-')}"
               if rej else "-")
        run = r["run"]
        err = f"{run['max_abs_error']:.4g} / {run['tolerance']:.4g}" if "cycles" in run else "-"
        s = r["secs"]
        weights = " / ".join(mode(r["modes"].get(w)) for w in BODY)
        print(f"| {L} | {r['status']} | {run.get('cycles_per_layer', '-')} | {err} | {weights} | "
              f"{r['place'].get('min_free_bytes')} | {why} | "
              f"{s['expand']:.1f} / {s['place']:.1f} / {s['run']:.1f} |", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    ops = None
    if "--ops" in args:
        i = args.index("--ops")
        ops, args = Path(args[i + 1]), args[:i] + args[i + 2:]
    main([int(x) for x in args if "=" not in x] or [1, 2, 4, 8, 16, 27], [x for x in args if "=" in x], ops)
