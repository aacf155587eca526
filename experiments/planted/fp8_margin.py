"""FP8_MARGIN (compiler/tolerance.py), measured: with FP8 activations, how far the device's
result lies from the reference, in units of the largest difference the reference's own draws
show (the unrounded evaluation and TWINS nudged ones), at every layer output and at the
graph's outputs, over seeds. The margin must exceed every ratio seen, with room.

    python experiments/planted/fp8_margin.py [SEEDS] [MODEL]     # default 16 seeds, the tiny tower

MODEL: tower (plants.TOWER, tiny target: 3 layers, 9 tokens) | vit (the CI-sized encoder:
32 wide, 2 layers, 15 tokens). Each row: seed, the largest device error / largest draw
over the layer outputs (the layers' `spread`), the same at the graph's outputs (the end-to-end
tolerance / FP8_MARGIN: the outputs end in an add, so no matmul term)."""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import plants  # noqa: E402
import numpy as np  # noqa: E402

from compiler import readback, tolerance  # noqa: E402
from compiler.phases import compile_trial  # noqa: E402

VIT = dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=15, layers=2)


def main(seeds: int, model: str):
    target = yaml.safe_load((ROOT / "conf" / "target" / "tiny.yaml").read_text())
    base = plants.TOWER if model == "tower" else VIT
    print("| model | seed | layers: device error / largest draw | outputs: device error / largest draw |")
    print("|---|---:|---:|---:|")
    worst = [0.0, 0.0]
    seen = []
    real = readback.ReadBack.check_layer

    def check_layer(self, n, i, snap):          # the device's error at each layer output, as checked
        dev = snap.array()[self.layer_rows].astype(np.float64)
        seen.append((i, float(np.abs(dev - self.layers["values"][i][self.layer_rows]).max())))
        return real(self, n, i, snap)
    readback.ReadBack.check_layer = check_layer
    for seed in range(seeds):
        cfg = dict(model=dict(base, fp8_activations=True, seed=seed), target=target, policy={"check": "rows"})
        seen.clear()
        r = compile_trial(cfg)
        m, spread = r["run"].metrics(), r["reference"].layers["spread"]
        lay = max(err / spread[i] for i, err in seen)
        out = m["max_abs_error"] / m["tolerance"] * tolerance.FP8_MARGIN
        worst = [max(worst[0], lay), max(worst[1], out)]
        print(f"| {model} | {seed} | {lay:.3f} | {out:.3f} |", flush=True)
    print(f"| {model} | largest | {worst[0]:.3f} | {worst[1]:.3f} |")


if __name__ == "__main__":
    a = sys.argv[1:]
    main(int(a[0]) if a else 16, a[1] if len(a) > 1 else "tower")
