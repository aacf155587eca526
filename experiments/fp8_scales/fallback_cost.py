"""What the f16 fallback costs in cycles: the planner's estimate of the best candidate, the Repeat body counted once
(plan.best_cycles_estimate, target and policy of params.yaml: ipu21) for the So400m tower with
all four casts FP8, with the attention output's cast kept in f16 (calibrate.keep_in_f16: the
default's fallback on the photos), with the GELU output's too (a limit of 0.1 at 27 layers), and with FP16
activations.

    python experiments/fp8_scales/fallback_cost.py [--layers 4]      # results-fallback-cost-4.txt, -27.txt

The scales do not change the plan (shapes and dtypes only), so the casts' scales are the static
bounds here (no calibration to run)."""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from compiler.models import vit  # noqa: E402
from compiler.models.calibrate import keep_in_f16  # noqa: E402
from compiler.phases import ModelResult, run_phase  # noqa: E402


def main(argv):
    layers = int(argv[argv.index("--layers") + 1]) if "--layers" in argv else 4
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    cfg = dict(model=p["model"], target=p["target"], policy=p["policy"])
    spec = dict(name="vit", preset="so400m", scope="tower", layers=layers, fp8_activations=True, fp8_scales="bound")
    g, d = vit.build(spec)
    g16, d16 = vit.build(dict(spec, fp8_activations=False))
    rows = [("all four casts FP8", g, d), ("attention output kept in f16 (the default's fallback)",
                                             keep_in_f16(g, ["attn"]), d),
            ("attention and GELU outputs kept in f16 (a limit of 0.1 at 27 layers)", keep_in_f16(g, ["attn", "gelu"]), d),
            ("FP16 activations", g16, d16)]
    print(f"So400m tower, {layers} layers, {p['target']['name']}\n| activations | plan.best_cycles_estimate |\n|---|---:|")
    for label, h, data in rows:
        print(f"| {label} | {run_phase('plan', {'model': ModelResult(h, data)}, cfg).metrics()['best_cycles_estimate']:,} |",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
