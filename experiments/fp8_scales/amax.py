"""How far each cast's input reaches, per layer, relative to its range (448 · scale), on the
seeded noise image and on all 14 bundled photos: > 1 clips.

    python experiments/fp8_scales/amax.py [--layers 4] [--keys "dict(fp8_calibration='seeded', calibration=1, fp8_fallback=False)"]

The So400m tower (seeded weights, seed 0, FP8 activations) is built once with the model keys
of --keys (by default the scales before issue #23 C: one seeded noise image, no fallback);
calibrate.cast_amax evaluates it on each input (each cast scaled to that input's own amax,
so nothing clips on the way) and each figure is that amax over the built range.
results-amax-4.txt."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compiler.models import photos, vit, vit_config  # noqa: E402
from compiler.models.attention import padded  # noqa: E402
from compiler.models.calibrate import cast_amax, photo_pixels, tower_input  # noqa: E402
from compiler.models.gemm import FP8_MAX  # noqa: E402
from compiler.models.image import MEAN, STD  # noqa: E402


def main(argv):
    L = int(argv[argv.index("--layers") + 1]) if "--layers" in argv else 4
    keys = argv[argv.index("--keys") + 1] if "--keys" in argv else "dict(fp8_calibration='seeded', calibration=1, fp8_fallback=False)"
    extra = eval(keys, {"dict": dict}) if keys.startswith("dict(") else ast.literal_eval(keys)
    spec = dict(name="vit", preset="so400m", scope="tower", layers=L, fp8_activations=True, **extra)
    g, data = vit.build(spec)
    d = vit_config.VitConfig(**spec).dims()
    casts = {n: op.inputs[0] for n, op in enumerate(g.ops) if op.kind == "cast"}
    rng = {n: np.broadcast_to(np.asarray(g.ops[n].attr("scale")), (L,)) * FP8_MAX for n in casts}
    print(f"So400m tower, {L} layers, {extra}: largest |x| / (448 · scale) per layer")
    print("| input | " + " | ".join(casts.values()) + " |\n|---|" + "---|" * len(casts))
    for name in ["noise (the trial's seeded image)"] + list(photos.ALL):
        if name.startswith("noise"):
            inp = {"pixels": data["pixels"]}
        else:
            inp = tower_input([photo_pixels(name, d["image"], d.get("crop_pct", 1.0), MEAN, STD)], d, padded(d["tokens"]))
        a = cast_amax(g, data, inp)
        tag = " (calibration)" if name in photos.CALIBRATION else ""
        print(f"| {name}{tag} | " + " | ".join(", ".join(f"{v:.2f}" for v in a[n] / rng[n]) for n in casts) + " |",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
