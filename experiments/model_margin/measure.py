"""model_check.MARGIN, measured: how far the graph's FP16-activation evaluation (f16-rounded,
as the device stores) lies from the independent float64 timm model, in units of that
evaluation's own f16 rounding noise (its rms relative difference from the unrounded, f32,
evaluation of the same graph); clean trials over seeds and photos, and every
model-definition plant (experiments/planted/model_plants.py) for the ratio they reach.
Only the model and reference phases run (no compile, no simulator).

    python experiments/model_margin/measure.py [SEEDS] [--so400m] [--plants]

Each row: mode, seed, photo, plant; the FP8 reference's rms relative error against the
FP16-activation twin per output (what policy.fp8_budget_* hold the device to; the device is
held to the reference end to end); the worst weight against its source; per output the rounded evaluation's rms relative error
against the model in units of the noise (held to model_check.MARGIN), the unrounded one's
(held to model_check.UNROUNDED), and the noise itself."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "planted"))
import plants  # noqa: E402

from compiler import compare  # noqa: E402
from compiler.phases import model_phase, reference_phase  # noqa: E402

PHOTOS = ("astronaut", "rocket", "coins")
SO400M = dict(name="vit", preset="so400m", layers=4)
FP8, W = [None], [None]     # the last trial's FP8-vs-twin figures and weights check


def ratios(cfg) -> dict:
    m = model_phase(cfg)
    ref = reference_phase(m)
    r = {n: (f["rms_rel_error"] / f["noise"], f["unrounded_rms_rel_error"] / f["noise"], f["noise"])
         for n, f in ref.model_figures.items()}
    if ref.fp16_outputs is not None:      # the FP8 evaluation against the FP16-activation twin (policy.fp8_budget_*)
        FP8[0] = {n: compare.rms_rel_error(m.graph, {n: ref.outputs[n]}, {n: ref.fp16_outputs[n]}) for n in r}
    W[0] = ref.model_weights
    return r


def main(argv):
    seeds = int(argv[0]) if argv and argv[0].isdigit() else 3
    base = SO400M if "--so400m" in argv else plants.TOWER
    print(f"model: {base}\n")
    print("| mode | seed | photo | plant | output: rounded / noise, unrounded / noise (noise) |")
    print("|---|---:|---|---|---|")
    worst = {}
    kinds = [None] + ([k for k in plants.KINDS if k.where == "model"] if "--plants" in argv else [])
    for fp8 in (False, True):
        mode = "FP8" if fp8 else "FP16"
        for seed in range(seeds):
            for photo in (PHOTOS if "--so400m" not in argv else PHOTOS[:1]):
                for kind in kinds:
                    if kind is not None and kind.fp8_only and not fp8:
                        continue
                    cfg = dict(model=dict(base, seed=seed, input=f"photo:{photo}", fp8_activations=fp8))
                    if kind is None:
                        r = ratios(cfg)
                        w = worst.setdefault(mode, [0.0, 0.0])
                        w[:] = [max(w[0], *(v[0] for v in r.values())), max(w[1], *(v[1] for v in r.values()))]
                    else:
                        with kind.plant(cfg):
                            r = ratios(cfg)
                    figs = "; ".join(f"{n} {a:.3f}, {b:.2g} (noise {c:.3g})" for n, (a, b, c) in sorted(r.items()))
                    if fp8 and kind is None:
                        figs += "; FP8 vs twin: " + ", ".join(f"{n} {v:.4f}" for n, v in sorted(FP8[0].items()))
                    figs += f"; weights: {W[0]['worst']} {W[0]['rms_rel_error']:.3g}"
                    print(f"| {mode} | {seed} | {photo} | {kind.name if kind else 'clean'} | {figs} |", flush=True)
    print("\nlargest clean ratios (rounded, unrounded): "
          + ", ".join(f"{k} {v[0]:.3f}, {v[1]:.2g}" for k, v in worst.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
